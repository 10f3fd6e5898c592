"""The walk evaluation's plain parts, shared by `unilab eval` (MJWarp, torch) and `unilab sim2sim` (MuJoCo, numpy):
the command grid, the suites, the overall means and the printed table. No torch here."""

from __future__ import annotations

# (vx m/s, vy m/s, wz rad/s): straight walking both ways, side steps, turning on the spot, and
# walking while turning or side-stepping; standing last.
COMMAND_GRID: tuple[tuple[float, float, float], ...] = (
    (0.5, 0.0, 0.0), (1.0, 0.0, 0.0), (-0.5, 0.0, 0.0),
    (0.0, 0.4, 0.0), (0.0, -0.4, 0.0),
    (0.0, 0.0, 0.8), (0.0, 0.0, -0.8),
    (0.5, 0.0, 0.8), (0.5, 0.0, -0.8), (1.0, 0.0, 0.8),
    (0.5, 0.4, 0.0), (-0.5, -0.4, 0.0),
    (0.0, 0.0, 0.0),
)

# Task settings of each suite: "nominal" is the training distribution without noise, pushes or
# friction draws; "robust" is the training randomisation.
SUITES: dict[str, dict] = {
    "nominal": {"observations": {"noise_scale": 0.0},
                "randomization": {"friction_range": None, "push_interval_s": None}},
    "robust": {"observations": {"noise_scale": 1.0},
               "randomization": {"friction_range": [0.3, 1.2], "push_interval_s": [1.0, 3.0],
                                 "push_max_vel_xy": 0.5}},
}


def overall(rows: list[dict]) -> dict:
    """Means over the grid (commands where every env fell have no velocity error)."""
    def mean(key):
        vals = [r[key] for r in rows if r[key] is not None]
        return sum(vals) / len(vals) if vals else None

    return {"lin_error": mean("lin_error"), "yaw_error": mean("yaw_error"),
            "fall_fraction": mean("fall_fraction"), "torque_share": mean("torque_share")}


def _num(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def format_suite(suite: str, result: dict) -> list[str]:
    """One suite's table: a line per command (`per_command` rows) and the `overall` line."""
    lines = [f"\n[{suite}]  command (vx, vy, wz) -> achieved      lin err m/s  yaw err rad/s  falls  torque/limit"]
    for r in result["per_command"]:
        cmd = "({:+.1f}, {:+.1f}, {:+.1f})".format(*r["command"])
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
    return lines
