"""The robust walk settings: schema checks of the new keys, the eval's push suite and combined means,
and the walk_robust preset (no Warp)."""

from __future__ import annotations

import pytest

from unilab.eval import walk
from unilab.tasks.g1_walk_flat import evaluation
from unilab.tasks.g1_walk_flat.config import CommandConfig, G1WalkFlatConfig, RandomizationConfig


@pytest.mark.parametrize("build, needle", [
    (lambda: G1WalkFlatConfig(commands=CommandConfig(single_axis_fraction=1.5)), "single_axis_fraction"),
    (lambda: G1WalkFlatConfig(randomization=RandomizationConfig(push_min_vel_xy=0.6)), "push_min_vel_xy"),
    (lambda: G1WalkFlatConfig(randomization=RandomizationConfig(push_curriculum_steps=-1)), "push_curriculum_steps"),
    (lambda: G1WalkFlatConfig(randomization=RandomizationConfig(push_curriculum_start=2.0)), "push_curriculum_start"),
    (lambda: G1WalkFlatConfig(randomization=RandomizationConfig(added_mass_kg=(2.0, 1.0))), "added_mass_kg"),
    (lambda: G1WalkFlatConfig(randomization=RandomizationConfig(added_mass_kg=(-5.0, 1.0))), "added_mass_kg"),
    (lambda: G1WalkFlatConfig(randomization=RandomizationConfig(kp_scale=(0.0, 1.0))), "kp_scale"),
    (lambda: G1WalkFlatConfig(randomization=RandomizationConfig(kd_scale=(0.9, 50.0))), "kd_scale"),
])
def test_bad_robust_values_fail_in_the_schema(build, needle):
    with pytest.raises(ValueError, match=needle):
        build()


def test_push_suite_pushes_hard_at_fixed_times_with_noise_and_friction():
    over = walk.task_overrides("push", walk.WalkEvalSettings())
    rnd = over["randomization"]
    assert rnd["push_interval_s"] == [2.0, 2.0] and (rnd["push_min_vel_xy"], rnd["push_max_vel_xy"]) == (0.5, 1.0)
    assert rnd["friction_range"] == [0.3, 1.2] and over["observations"]["noise_scale"] == 1.0
    for suite in walk.SUITES:  # no training-only draws, full-size pushes from the start, whatever the run used
        r = walk.task_overrides(suite, walk.WalkEvalSettings())["randomization"]
        assert r["added_mass_kg"] is None and r["kp_scale"] is None and r["push_curriculum_steps"] == 0
    G1WalkFlatConfig(**{k: v for k, v in over.items() if k not in ("randomization", "observations")},
                     randomization=RandomizationConfig(**rnd))


def test_overall_reports_combined_commands_and_the_worst_fall_share():
    rows = [{"command": [0.5, 0.3, 0.5], "lin_error": 0.2, "yaw_error": 0.1, "fall_fraction": 0.0, "torque_share": 0.1},
            {"command": [0.5, 0.0, 0.0], "lin_error": 0.1, "yaw_error": 0.1, "fall_fraction": 0.5, "torque_share": 0.1},
            {"command": [-0.4, 0.3, 0.5], "lin_error": 0.4, "yaw_error": 0.1, "fall_fraction": 0.25,
             "torque_share": 0.1}]
    o = walk.overall(rows)
    assert o["combined_lin_error"] == pytest.approx(0.3) and o["combined_fall_fraction"] == pytest.approx(0.125)
    assert o["max_fall_fraction"] == 0.5 and o["lin_error"] == pytest.approx(0.7 / 3)
    assert any(walk.is_combined(c) for c in walk.COMMAND_GRID) and (0.0, 0.25, 0.0) in walk.COMMAND_GRID


def test_overall_reports_how_unevenly_mirror_image_commands_are_tracked():
    def row(command, lin, yaw):
        return {"command": list(command), "achieved": list(command), "lin_error": lin, "yaw_error": yaw,
                "fall_fraction": 0.0, "torque_share": 0.1}

    rows = [row((0.0, 0.4, 0.0), 0.05, 0.02), row((0.0, -0.4, 0.0), 0.21, 0.06),   # a pair: gaps 0.16, 0.04
            row((0.5, 0.3, 0.5), 0.10, 0.10), row((0.5, -0.3, -0.5), 0.14, 0.30),  # a pair: gaps 0.04, 0.20
            row((0.5, 0.0, 0.0), 0.9, 0.9), row((0.0, 0.0, 0.0), 0.9, 0.9),         # their own mirror images
            row((0.5, 0.0, 0.8), 0.9, 0.9)]                                         # its mirror image not held
    o = walk.overall(rows)
    assert o["mirror_lin_gap"] == pytest.approx(0.10) and o["mirror_yaw_gap"] == pytest.approx(0.12)
    rows[1]["lin_error"] = rows[1]["yaw_error"] = None  # every env fell on one side: that pair is not measured
    o = walk.overall(rows)
    assert o["mirror_lin_gap"] == pytest.approx(0.04) and o["mirror_yaw_gap"] == pytest.approx(0.20)
    assert walk.overall(rows[4:])["mirror_lin_gap"] is None
    assert "mirror-image pairs" in "\n".join(evaluation.format_suite("nominal", {"per_command": rows, "overall": o}))
    # Each grid holds pairs for every axis a robot can get wrong one way: side steps and turns.
    for grid in (walk.COMMAND_GRID, walk.SLOW_GRID):
        pairs = {c for c in grid if evaluation.mirror_of(c) != c and evaluation.mirror_of(c) in grid}
        assert any(c[1] for c in pairs) and any(c[2] for c in pairs)


def test_the_preset_is_the_measured_recipe():
    """The settings the robust recipe's published numbers were measured with (walk page, history)."""
    from train_compose import composed

    base = composed(["algo=fastsac", "task=g1_walk_flat"])
    cfg = composed(["algo=fastsac", "task=g1_walk_flat", "+preset=walk_robust"])
    assert base["task.rewards.tracking_std"] == 0.5 and cfg["task.rewards.tracking_std"] == 0.35
    assert (cfg["task.randomization.push_max_vel_xy"], cfg["task.commands.single_axis_fraction"]) == (1.0, 0.2)
    assert cfg["task.rewards.weights.torso_orientation"] == -5.0 and cfg["task.randomization.kp_scale"] == [0.85, 1.15]


def test_the_table_has_no_combined_line_without_a_combined_command():
    """One `--command 0.5,0,0` whose envs all fell: no 'combined ... 0.0%' line made of nothing."""
    from unilab.tasks.g1_walk_flat.evaluation import format_suite

    rows = [{"command": [0.5, 0.0, 0.0], "achieved": None, "lin_error": None, "yaw_error": None, "fall_fraction": 1.0,
             "torque_share": None}]
    lines = format_suite("nominal", {"per_command": rows, "overall": walk.overall(rows)})
    assert not any("combined" in line for line in lines)
    assert "100.0%" in lines[-1] and "worst command falls" in lines[-1]
    rows[0]["command"] = [0.5, 0.3, 0.5]
    lines = format_suite("nominal", {"per_command": rows, "overall": walk.overall(rows)})
    assert any("combined" in line and "100.0%" in line for line in lines)
