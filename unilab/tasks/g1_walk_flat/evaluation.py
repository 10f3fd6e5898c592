"""The walk evaluation's plain parts, shared by `unilab eval` (MJWarp, torch) and `unilab sim2sim` (MuJoCo, numpy):
the command grid, the suites, the overall means and the printed table. No torch here."""

from __future__ import annotations

# (vx m/s, vy m/s, wz rad/s): straight walking both ways, side steps (a slow one too), turning on the
# spot, walking while turning or side-stepping, all three at once; standing last.
COMMAND_GRID: tuple[tuple[float, float, float], ...] = (
    (0.5, 0.0, 0.0), (1.0, 0.0, 0.0), (-0.5, 0.0, 0.0),
    (0.0, 0.4, 0.0), (0.0, -0.4, 0.0), (0.0, 0.25, 0.0),
    (0.0, 0.0, 0.8), (0.0, 0.0, -0.8),
    (0.5, 0.0, 0.8), (0.5, 0.0, -0.8), (1.0, 0.0, 0.8),
    (0.5, 0.4, 0.0), (-0.5, -0.4, 0.0),
    (0.5, 0.3, 0.5), (0.5, -0.3, -0.5), (-0.4, 0.3, 0.5),
    (0.0, 0.0, 0.0),
)

# Slow commands, near the low end of the training range (planar commands under task.commands.min_lin_speed, yaw
# rates under min_ang_speed, are zeroed there): each axis alone both ways, one of all three, standing last. A policy
# that stands still below some speed instead of walking shows it here; the grid above holds one slow command.
SLOW_GRID: tuple[tuple[float, float, float], ...] = (
    (0.15, 0.0, 0.0), (0.25, 0.0, 0.0), (-0.25, 0.0, 0.0),
    (0.0, 0.15, 0.0), (0.0, 0.25, 0.0), (0.0, -0.25, 0.0),
    (0.0, 0.0, 0.3), (0.0, 0.0, -0.3),
    (0.15, 0.15, 0.3),
    (0.0, 0.0, 0.0),
)

# Every suite sets these itself, whatever the run trained with: no payload or motor draws, and pushes
# at their full size from the first step.
_FIXED = {"added_mass_kg": None, "kp_scale": None, "kd_scale": None, "push_curriculum_steps": 0}

# Task settings of each suite: "nominal" is the command grid without noise, pushes or friction draws;
# "robust" adds observation noise, friction 0.3-1.2 and a push of up to 0.5 m/s every 1-3 s; "push"
# pushes every env every 2 s (all at once) by 0.5-1.0 m/s in a uniform direction, with the noise and
# friction of "robust"; "slow" is nominal on the slow commands.
_NOMINAL = {"observations": {"noise_scale": 0.0},
            "randomization": {**_FIXED, "friction_range": None, "push_interval_s": None}}
SUITES: dict[str, dict] = {
    "nominal": _NOMINAL,
    "robust": {"observations": {"noise_scale": 1.0},
               "randomization": {**_FIXED, "friction_range": [0.3, 1.2], "push_interval_s": [1.0, 3.0],
                                 "push_min_vel_xy": 0.0, "push_max_vel_xy": 0.5}},
    "push": {"observations": {"noise_scale": 1.0},
             "randomization": {**_FIXED, "friction_range": [0.3, 1.2], "push_interval_s": [2.0, 2.0],
                               "push_min_vel_xy": 0.5, "push_max_vel_xy": 1.0}},
    "slow": _NOMINAL,
}


def suite_commands(suite: str) -> tuple[tuple[float, float, float], ...]:
    """The commands a suite holds: the slow ones for "slow", the grid for the others."""
    return SLOW_GRID if suite == "slow" else COMMAND_GRID


def is_combined(command) -> bool:
    """Walking and side-stepping and turning at once."""
    return all(c != 0.0 for c in command)


def mirror_of(command) -> tuple[float, float, float]:
    """The command's mirror image through the robot's sagittal plane: side step and turn reversed."""
    vx, vy, wz = command
    return (vx, -vy + 0.0, -wz + 0.0)  # + 0.0: no negative zeros


def mirror_gaps(rows: list[dict]) -> dict:
    """How unevenly a policy tracks mirror-image commands (a symmetric robot could track both alike): the
    mean |difference| of the linear and of the yaw error over the pairs of commands that both hold and that
    were both measured. None where no such pair exists."""
    by_command = {tuple(r["command"]): r for r in rows}
    pairs = [(r, by_command[m]) for c, r in by_command.items()  # c < m: each pair once, no self-mirror
             if (m := mirror_of(c)) in by_command and c < m]
    measured = [(a, b) for a, b in pairs if a["lin_error"] is not None and b["lin_error"] is not None]

    def gap(key):
        return sum(abs(a[key] - b[key]) for a, b in measured) / len(measured) if measured else None

    return {"mirror_lin_gap": gap("lin_error"), "mirror_yaw_gap": gap("yaw_error")}


def overall(rows: list[dict]) -> dict:
    """Means over the grid (commands where every env fell have no velocity error), the linear error
    and falls of the combined commands alone (vx, vy and wz all non-zero), and the mirror-image gaps."""
    def mean(key, subset=rows):
        vals = [r[key] for r in subset if r[key] is not None]
        return sum(vals) / len(vals) if vals else None

    combined = [r for r in rows if is_combined(r["command"])]
    return {"lin_error": mean("lin_error"), "yaw_error": mean("yaw_error"),
            "fall_fraction": mean("fall_fraction"), "torque_share": mean("torque_share"),
            "combined_lin_error": mean("lin_error", combined), "combined_fall_fraction": mean("fall_fraction", combined),
            "max_fall_fraction": max((r["fall_fraction"] for r in rows), default=None), **mirror_gaps(rows)}


def _num(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def format_suite(suite: str, result: dict) -> list[str]:
    """One suite's table: a line per command (`per_command` rows) and the `overall` line."""
    lines = [f"\n[{suite}]  command (vx, vy, wz) -> achieved      lin err m/s  yaw err rad/s  falls  torque/limit"]
    for r in result["per_command"]:
        cmd = "({:+.2f}, {:+.2f}, {:+.2f})".format(*r["command"])
        if r["lin_error"] is None:  # every env of the command fell: no velocity to measure
            fell = "every env fell during the hold: nothing measured"
            lines.append(f"  {cmd:<20} {fell:<50} {100 * r['fall_fraction']:>5.1f}%")
            continue
        ach = "({:+.2f}, {:+.2f}, {:+.2f})".format(*r["achieved"])
        lines.append(f"  {cmd:<20} {ach:<22} {_num(r['lin_error']):>10} {_num(r['yaw_error']):>13} "
                     f"{100 * r['fall_fraction']:>5.1f}% {_num(r['torque_share'], '{:.2f}'):>12}")
    o = result["overall"]
    lines.append(f"  {'overall':<43} {_num(o['lin_error']):>10} {_num(o['yaw_error']):>13} "
                 f"{100 * (o['fall_fraction'] or 0):>5.1f}% {_num(o['torque_share'], '{:.2f}'):>12}")
    if o.get("combined_fall_fraction") is not None:  # only where the commands held some combined ones
        lines.append(f"  {'combined (vx, vy, wz all set)':<43} {_num(o.get('combined_lin_error')):>10} "
                     f"{'':>13} {100 * o['combined_fall_fraction']:>5.1f}%")
    if o.get("mirror_lin_gap") is not None:
        lines.append(f"  {'mirror-image pairs, |difference|':<43} {_num(o['mirror_lin_gap']):>10} "
                     f"{_num(o['mirror_yaw_gap']):>13}")
    if o.get("max_fall_fraction") is not None:
        lines.append(f"  {'worst command falls':<43} {'':>10} {'':>13} {100 * o['max_fall_fraction']:>5.1f}%")
    return lines
