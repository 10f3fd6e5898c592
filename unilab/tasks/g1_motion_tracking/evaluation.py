"""The motion tracking evaluation's plain parts, shared by `unilab eval` (MJWarp, torch) and `unilab sim2sim`
(MuJoCo, numpy): the metrics, the per-body and per-joint breakdown, the overall means and the printed table. No
torch here."""

from __future__ import annotations

METRICS = ("completion", "body_pos_error_mm", "joint_pos_error_rad", "anchor_ori_error_rad", "fall_fraction")
# The published tables' protocol, beside the anchor-relative body error above (the one the policy is trained on):
# the env's `protocol_errors` (global and root-relative mean body position errors), and success, a clip played to
# its end with the global error never above SUCCESS_MAX_GLOBAL_M (the threshold of PHC's and H2O's tables).
PROTOCOL = ("global", "root_relative")
PROTOCOL_METRICS = ("global_body_pos_error_mm", "root_relative_body_pos_error_mm", "success")
SUCCESS_MAX_GLOBAL_M = 0.5
# The per-body and per-joint breakdown of a row: its key, the env's error, the scale to the key's unit.
BREAKDOWN = (("body_pos_error_mm_by_body", "body_pos", 1000.0), ("joint_pos_error_rad_by_joint", "joint_pos", 1.0))


def overall(rows: list[dict]) -> dict:
    """Means over the clips (a clip where no env tracked a single step has no errors)."""
    def mean(key):
        vals = [r[key] for r in rows if r[key] is not None]
        return sum(vals) / len(vals) if vals else None

    def mean_by_part(key):
        tables = [r[key] for r in rows if r.get(key)]
        return {part: sum(t[part] for t in tables) / len(tables) for part in tables[0]} if tables else None

    return {**{key: mean(key) for key in (*METRICS, *PROTOCOL_METRICS)},
            **{key: mean_by_part(key) for key, _, _ in BREAKDOWN}}


def worst_parts(row: dict, count: int) -> list[str]:
    """The `count` largest per-body and per-joint errors of a row, as lines (none where the row has none)."""
    lines = []
    for key, label, fmt in (("body_pos_error_mm_by_body", "bodies", "{:.0f} mm"),
                            ("joint_pos_error_rad_by_joint", "joints", "{:.3f} rad")):
        table = row.get(key)
        if count > 0 and table:
            worst = sorted(table.items(), key=lambda item: -item[1])[:count]
            lines.append(f"      largest {label}: " + ", ".join(f"{name} {fmt.format(v)}" for name, v in worst))
    return lines


def format_suite(suite: str, result: dict, parts: int = 0) -> list[str]:
    """The suite's table; with `parts` > 0, under each clip its `parts` largest body and joint errors."""
    width = max([len("clip"), len("mean")] + [len(r["clip"]) for r in result["per_clip"]])  # whole names

    def num(x, fmt):
        return "-" if x is None else fmt.format(x)

    def line(name, r):
        return (f"  {name:<{width}} {100 * r['completion']:>9.1f}% {num(r['body_pos_error_mm'], '{:.1f}'):>12} "
                f"{num(r['joint_pos_error_rad'], '{:.3f}'):>13} {num(r['anchor_ori_error_rad'], '{:.3f}'):>14} "
                f"{100 * (r['fall_fraction'] or 0):>5.1f}% {num(r['global_body_pos_error_mm'], '{:.1f}'):>9} "
                f"{num(r['root_relative_body_pos_error_mm'], '{:.1f}'):>11} {100 * (r['success'] or 0):>7.1f}%")

    lines = [f"\n[{suite}]", f"  {'clip':<{width}} completion  body pos mm  joint pos rad  anchor ori rad  falls"
                              f"  global mm  root-rel mm  success (global <= {1000 * SUCCESS_MAX_GLOBAL_M:.0f} mm)"]
    for r in result["per_clip"]:
        lines += [line(r["clip"], r), *worst_parts(r, parts)]
    lines.append(line("mean", result["overall"]))
    return lines
