"""The motion library (a directory of clips, concatenated) and the start sampler over its bins."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from unilab.motion import MotionClip, MotionClipError, save_motion_clip
from unilab.motion.library import load_motion_library
from unilab.tasks.g1_motion_tracking.config import SamplingConfig
from unilab.tasks.g1_motion_tracking.sampling import MAX_CLIPS_LOGGED, StartSampler

BODIES = ("pelvis", "torso_link")


def random_clip(frames: int, seed: int, fps: float = 50.0, bodies=BODIES) -> MotionClip:
    rng = np.random.default_rng(seed)
    b = len(bodies)
    quat = rng.normal(size=(frames, b, 4))
    quat /= np.linalg.norm(quat, axis=-1, keepdims=True)
    f32 = np.float32
    return MotionClip(fps=fps, joint_pos=rng.normal(size=(frames, 29)).astype(f32),
                      joint_vel=rng.normal(size=(frames, 29)).astype(f32), body_names=tuple(bodies),
                      body_pos_w=rng.normal(size=(frames, b, 3)).astype(f32), body_quat_w=quat.astype(f32),
                      body_lin_vel_w=rng.normal(size=(frames, b, 3)).astype(f32),
                      body_ang_vel_w=rng.normal(size=(frames, b, 3)).astype(f32))


@pytest.fixture
def clip_dir(tmp_path):
    d = tmp_path / "clips"
    # Written out of name order: the library sorts by name.
    for name, frames, seed in (("c_turn", 40, 3), ("a_walk", 30, 1), ("b_squat", 75, 2)):
        save_motion_clip(random_clip(frames, seed), d / f"{name}.npz")
    (d / "notes.txt").write_text("not a clip")
    return d


def test_directory_concatenates_clips_in_name_order(clip_dir):
    lib = load_motion_library(clip_dir)
    assert lib.names == ("a_walk", "b_squat", "c_turn")
    assert lib.lengths.tolist() == [30, 75, 40] and lib.offsets.tolist() == [0, 30, 105] and lib.num_frames == 145
    for field in ("joint_pos", "body_pos_w", "body_quat_w", "body_ang_vel_w"):
        cat = lib.concatenated(field)
        assert cat.shape[0] == 145
        for name, offset, frames, seed in (("a_walk", 0, 30, 1), ("b_squat", 30, 75, 2), ("c_turn", 105, 40, 3)):
            own = getattr(random_clip(frames, seed), field)
            for k in (0, 7, frames - 1):  # frame k of clip `name` is the file's frame k
                np.testing.assert_allclose(cat[offset + k], own[k], rtol=0, atol=1e-6, err_msg=f"{name} {field} {k}")
    # A single file is a library of one clip named by its stem.
    one = load_motion_library(clip_dir / "b_squat.npz")
    assert one.names == ("b_squat",) and one.num_frames == 75


def test_library_selects_bodies_and_refuses_mixed_rates(clip_dir, tmp_path):
    lib = load_motion_library(clip_dir, body_names=["torso_link"])
    assert lib.concatenated("body_pos_w").shape == (145, 1, 3)
    with pytest.raises(MotionClipError, match="missing required bodies"):
        load_motion_library(clip_dir, body_names=["head"])
    save_motion_clip(random_clip(20, 9, fps=30.0), clip_dir / "d_fast.npz")
    with pytest.raises(MotionClipError, match="d_fast.npz: field 'fps'"):
        load_motion_library(clip_dir)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MotionClipError, match="no .npz motion clip"):
        load_motion_library(empty)


def test_bad_clip_in_a_directory_is_named(clip_dir):
    (clip_dir / "b_broken.npz").write_bytes(b"not a zip archive")
    with pytest.raises(MotionClipError, match="b_broken.npz: not an npz archive"):
        load_motion_library(clip_dir)


# ---------------------------------------------------------------- sampler
LENGTHS, OFFSETS = [101, 51, 26], [0, 101, 152]  # 2 s, 1 s, 0.5 s at 50 fps


def sampler(mode="adaptive", seed=0, **kw) -> StartSampler:
    cfg = SamplingConfig(mode=mode, **kw)
    return StartSampler(LENGTHS, OFFSETS, 50.0, cfg, torch.device("cpu"), torch.Generator().manual_seed(seed))


def test_bins_cover_each_clips_start_frames():
    s = sampler(bin_s=0.5)
    # 100, 50 and 25 start frames in bins of 25.
    assert s.num_bins == 4 + 2 + 1 and s.bin_clip.tolist() == [0, 0, 0, 0, 1, 1, 2]
    assert s.bin_lo.tolist() == [0, 25, 50, 75, 101, 126, 152] and s.bin_size.tolist() == [25] * 7
    # A frame maps to its clip's bin; a clip's last frame (no start) to its last bin.
    clip, frame = torch.tensor([0, 0, 1, 1, 2]), torch.tensor([0, 100, 101, 151, 177])
    assert s.bin_of(clip, frame).tolist() == [0, 3, 4, 5, 6]
    torch.testing.assert_close(s.probabilities().sum(), torch.tensor(1.0))


@pytest.mark.parametrize("mode", ["uniform", "adaptive"])
def test_samples_are_valid_start_frames_of_their_clip(mode):
    s = sampler(mode)
    s.bin_failure_rate[1] = 1.0  # some failure weight, so the adaptive mixture is exercised
    clip, frame = s.sample(20000)
    lo, length = torch.tensor(OFFSETS)[clip], torch.tensor(LENGTHS)[clip]
    assert ((frame >= lo) & (frame <= lo + length - 2)).all()  # never the last frame: one step must remain
    starts = torch.bincount(frame, minlength=sum(LENGTHS))
    valid = torch.cat([torch.arange(o, o + n - 1) for o, n in zip(OFFSETS, LENGTHS)])
    assert (starts[valid] > 0).all() and starts.sum() == starts[valid].sum()


def test_uniform_mode_weighs_clips_by_duration_and_adaptive_floor_by_clip():
    clip, _ = sampler("uniform").sample(30000)
    share = torch.bincount(clip, minlength=3).float() / 30000
    torch.testing.assert_close(share, torch.tensor([100, 50, 25]) / 175.0, atol=0.015, rtol=0)
    # Nothing failed yet: the adaptive floor gives each clip the same share.
    clip, _ = sampler("adaptive").sample(30000)
    share = torch.bincount(clip, minlength=3).float() / 30000
    torch.testing.assert_close(share, torch.full((3,), 1 / 3), atol=0.015, rtol=0)
    # Within a clip every start frame is equally likely, also in a shorter last bin (100 = 6 * 15 + 10).
    s = sampler("adaptive", bin_s=0.3)
    assert s.bin_size[:7].tolist() == [15] * 6 + [10]
    per_frame = s.probabilities() / s.bin_size
    torch.testing.assert_close(per_frame[:7], torch.full((7,), 1 / 300))


def test_adaptive_sampling_concentrates_on_the_failing_bin():
    s = sampler(smoothing=0.1, uniform_share=0.1, blur=0.5, blur_bins=2)
    fail_bin = 1  # clip 0, frames 50..99
    # Episodes of 40 envs end every step: those in clip 0 at frame 70 fail, the rest time out.
    clip = torch.tensor([0] * 10 + [1] * 10 + [2] * 20)
    frame = torch.tensor([70] * 10 + [120] * 10 + [160] * 20)
    failed = clip == 0
    for _ in range(50):
        s.record(clip, frame, ended=torch.ones(40, dtype=torch.bool), failed=failed)
    assert s.bin_of(torch.tensor([0]), torch.tensor([70])).item() == fail_bin
    p = s.probabilities()
    # Failure part: bin 1 and, blurred, bin 0 before it (weight 0.5); the floor: 0.1 / (3 clips * bins).
    floor = 0.1 * torch.tensor([1 / 6, 1 / 6, 1 / 3, 1 / 3])
    expected = floor + 0.9 * torch.tensor([0.5, 1.0, 0.0, 0.0]) / 1.5
    torch.testing.assert_close(p, expected, atol=1e-5, rtol=0)
    clip_s, frame_s = s.sample(20000)
    in_bin = (clip_s == 0) & (frame_s >= 50) & (frame_s < 100)
    assert abs(in_bin.float().mean().item() - expected[fail_bin].item()) < 0.015
    # The per-clip failure rate follows the share of failed episode ends; the metrics say so.
    m = s.metrics(["a", "b", "c"])
    assert m["metrics/clip/a/failure_rate"] > 0.9 and m["metrics/clip/b/failure_rate"] == 0
    assert 0 < m["metrics/sampling/entropy"] < 1 and m["metrics/sampling/max_clip_share"] > 0.9
    assert m["metrics/sampling/max_clip_index"] == 0  # clip a, where the failures were


def failing(rates, **kw) -> StartSampler:
    """A sampler (one bin per blur, so the failure part is the rates normalised) with these bin rates."""
    s = sampler(blur_bins=1, uniform_share=0.1, **kw)
    s.bin_failure_rate.copy_(torch.tensor(rates))
    return s


def per_clip(p: torch.Tensor) -> torch.Tensor:
    return torch.zeros(3).index_add_(0, torch.tensor([0, 0, 1, 2]), p)


def test_clip_cap_moves_the_excess_to_the_other_failing_clips():
    # Bins: clip 0 = bins 0, 1; clip 1 = bin 2; clip 2 = bin 3. Clip 0 has 80 % of the failures.
    rates = [0.8, 0.0, 0.15, 0.05]
    uncapped = failing(rates).probabilities()
    capped = failing(rates, max_clip_share=0.5).probabilities()
    floor = 0.1 * torch.tensor([1 / 6, 1 / 6, 1 / 3, 1 / 3])
    torch.testing.assert_close(uncapped, floor + 0.9 * torch.tensor(rates))
    # Clip 0 keeps 0.5; its 0.3 goes to clips 1 and 2 as 3:1, their own failure weights.
    torch.testing.assert_close(capped, floor + 0.9 * torch.tensor([0.5, 0.0, 0.375, 0.125]))
    assert per_clip(capped)[0] < per_clip(uncapped)[0]
    clip, _ = failing(rates, max_clip_share=0.5).sample(30000)
    share = torch.bincount(clip, minlength=3).float() / 30000
    torch.testing.assert_close(share, per_clip(capped), atol=0.015, rtol=0)


def test_clip_cap_gives_the_floor_what_no_failing_clip_can_take():
    capped = failing([1.0, 0.5, 0.0, 0.0], max_clip_share=0.4).probabilities()
    floor = torch.tensor([1 / 6, 1 / 6, 1 / 3, 1 / 3])
    # Only clip 0 fails: 0.4 of the failure part stays with it, 0.6 joins the floor's 0.1.
    torch.testing.assert_close(capped, 0.9 * torch.tensor([0.4 * 2 / 3, 0.4 / 3, 0, 0]) + (0.1 + 0.9 * 0.6) * floor)
    assert capped.sum().item() == pytest.approx(1.0)
    m = failing([1.0, 0.5, 0.0, 0.0], max_clip_share=0.4).metrics(["a", "b", "c"])
    assert m["metrics/sampling/max_clip_share"].item() == pytest.approx(per_clip(capped)[0].item())


@settings(max_examples=300, deadline=None)
@given(rates=st.lists(st.just(0.0) | st.floats(1e-3, 1), min_size=4, max_size=4).filter(lambda r: sum(r) > 0),
       cap=st.just(1.0) | st.floats(0.05, 1.0))
def test_clip_cap_holds_and_keeps_the_failing_clips_in_proportion(rates, cap):
    s = failing(rates, max_clip_share=cap)
    p = s.probabilities()
    assert (p >= 0).all() and p.sum().item() == pytest.approx(1.0, abs=1e-5)
    old = per_clip(torch.tensor(rates) / sum(rates))
    new = per_clip(s._capped(torch.tensor(rates) / sum(rates), cap))
    assert (new <= cap + 1e-5).all()
    # Water-filling: every clip under the cap grew by the same factor (or kept all it had), and
    # nothing was given away while a failing clip still had room.
    free = (new < cap - 1e-5) & (old > 0)
    if free.sum() > 1:
        ratio = new[free] / old[free]
        torch.testing.assert_close(ratio, ratio[:1].expand_as(ratio), atol=1e-4, rtol=1e-4)
    if free.any():
        assert new.sum().item() == pytest.approx(1.0, abs=1e-5)
    if cap == 1.0:  # no cap: the plain mixture of the floor and the normalised failure rates
        floor = torch.tensor([1 / 6, 1 / 6, 1 / 3, 1 / 3])
        torch.testing.assert_close(p, 0.1 * floor + 0.9 * torch.tensor(rates) / sum(rates))


def test_blur_stays_inside_a_clip_and_failures_fade():
    s = sampler(smoothing=0.5, blur=0.5, blur_bins=3, uniform_share=0.0)
    # A failure in clip 1's first bin (index 2) lends no weight to clip 0's last bin (index 1).
    s.record(torch.tensor([1]), torch.tensor([101]), ended=torch.tensor([True]), failed=torch.tensor([True]))
    torch.testing.assert_close(s.probabilities(), torch.tensor([0.0, 0.0, 1.0, 0.0]))
    assert s.metrics(["a", "b"])["metrics/sampling/max_clip_index"] == 1  # every start goes to clip b
    for _ in range(30):  # no failure any more: the smoothed rate decays towards zero
        s.record(torch.tensor([1]), torch.tensor([101]), ended=torch.tensor([True]), failed=torch.tensor([False]))
    assert s.bin_failure_rate.max() < 1e-8


def test_metrics_stay_bounded_with_many_clips():
    n = MAX_CLIPS_LOGGED + 4
    cfg = SamplingConfig()
    s = StartSampler([11] * n, [11 * i for i in range(n)], 50.0, cfg, torch.device("cpu"), torch.Generator())
    m = s.metrics([f"clip{i}" for i in range(n)])
    assert len(m) == 5 and "metrics/clip_failure_rate_max" in m
    assert m["metrics/sampling/entropy"].item() == pytest.approx(1.0)


def test_sampling_config_is_checked():
    from unilab.tasks.g1_motion_tracking.config import G1MotionTrackingConfig

    for bad, needle in ((dict(mode="greedy"), "task.sampling.mode='greedy'"), (dict(bin_s=0.0), "bin_s"),
                        (dict(uniform_share=1.5), "uniform_share"), (dict(smoothing=0.0), "smoothing"),
                        (dict(blur_bins=0), "blur_bins"),
                        (dict(max_clip_share=0.0), "max_clip_share"), (dict(max_clip_share=1.2), "max_clip_share")):
        with pytest.raises(ValueError, match=needle):
            G1MotionTrackingConfig(num_envs=2, sampling=SamplingConfig(**bad))


def test_directory_with_a_bad_clip_fails_at_compose(tmp_path, monkeypatch, capsys):
    import unilab.launcher.launch as launch_mod
    from unilab.cli.train import main as train_main
    from unilab.motion.synth import synthesize

    launched = []
    monkeypatch.setattr(launch_mod, "launch", lambda *a, **k: launched.append(a))
    clips = tmp_path / "clips"
    save_motion_clip(synthesize(duration=0.5), clips / "good.npz")
    np.savez(clips / "bad.npz", fps=50.0)
    log_dir = tmp_path / "runs"
    with pytest.raises(SystemExit) as exc:
        train_main(["--task", "g1_motion_tracking", "training.run.device=cpu", f"task.motion_file={clips}",
                    f"training.run.log_dir={log_dir}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "bad.npz: field 'body_names': missing" in err
    assert f"task.motion_file='{clips}'" in err
    assert not log_dir.exists() and not launched
    # The same directory without the bad clip composes (the env would load it the same way).
    (clips / "bad.npz").unlink()
    from unilab.tasks.g1_motion_tracking.config import G1MotionTrackingConfig

    assert G1MotionTrackingConfig(num_envs=2, motion_file=str(clips)).motion_file == str(clips)


def test_the_library_preset_is_the_measured_recipe():
    """+preset=tracking_library pins what the tracking page measured, on either FlashSAC config; its run
    length sets where the learning rate reaches its floor (the schedule follows max_iterations)."""
    import math

    from train_compose import composed

    from unilab.algos.common import warmup_cosine

    base = composed(["algo=flashsac", "task=g1_motion_tracking"])
    assert base["task.sampling.max_clip_share"] == 1.0 and base["algo.actor_hidden_dim"] == 128
    for algo in ("flashsac", "flashsac_g1_motion_tracking"):
        cfg = composed([f"algo={algo}", "task=g1_motion_tracking", "+preset=tracking_library"])
        assert cfg["task.sampling.max_clip_share"] == 0.1
        assert (cfg["algo.actor_hidden_dim"], cfg["algo.critic_hidden_dim"], cfg["algo.batch_size"]) == (256, 512, 2048)
        assert (cfg["algo.max_iterations"], cfg["algo.lr_decay_steps"], cfg["algo.lr_end"]) == (50000, 0, 3e-5)
        assert cfg["algo.min_alpha"] == 0.0005 and base["algo.min_alpha"] == 0  # the floor is the preset's alone
        end = cfg["algo.max_iterations"] * cfg["algo.updates_per_step"]
        schedule = dict(init=cfg["algo.lr_init"], peak=cfg["algo.lr"], end=cfg["algo.lr_end"], warmup_steps=0,
                        total_steps=end)
        assert math.isclose(warmup_cosine(torch.tensor(end), **schedule).item(), 3e-5, rel_tol=1e-5)
        assert warmup_cosine(torch.tensor(end // 2), **schedule).item() > 1e-4  # still decaying half-way


def test_the_library_preset_names_its_key_when_the_algorithm_has_no_schedule(tmp_path, spies, capsys):
    from train_calls import run_train

    assert run_train("--algo", "fastsac", "--task", "g1_motion_tracking", "+preset=tracking_library",
                     "training.run.device=cpu", f"training.run.log_dir={tmp_path / 'runs'}") == 2
    assert "algo.lr_end: no such key" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and spies[0].calls == []
