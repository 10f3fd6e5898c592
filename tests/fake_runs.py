"""Fake run directories (metrics.jsonl, manifest, summary, config) for `unilab bench`, and a fake `train` that
writes them: `fake_train(argv, env)` in-process, or `python tests/fake_runs.py TRAIN-ARGS` as a subprocess.

The fake `train` reads what to make of each job from $FAKE_GATE_SPEC (JSON):
  {"sps": {"CASE": [default, mps]}, "outcome": {"CASE/ARM/SEED": "failed" | "refused" | "interrupted" | "wait"},
   "calls": "calls.jsonl"}
CASE is ALGO_TASK, ARM default or mps. An MPS run records `effective: mps` only when it was given
CUDA_MPS_PIPE_DIRECTORY (as a run that reached the daemon would). "wait": the job writes `<run dir>.waiting`
and waits for SIGINT, then ends interrupted (exit 130). Without an entry in "sps", the arms run at 50k and 62k
env-steps/s (+24 %).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

ITERATIONS = 300
SPREAD = 500.0  # the last 100 rows alternate mean - SPREAD, mean + SPREAD


def make_run(root: Path, name: str, *, mode: str | None, sps: float, seed: int = 1, rows: int = ITERATIONS,
             status: str = "completed", effective: str | None = "auto", clients: bool = True,
             backpressure_every: int = 0, nan_trips: int = 0, daemon_reachable: bool = False,
             num_envs: int = 4096, algo: str = "fastsac", task: str = "g1_walk_flat",
             blocked: bool = False) -> Path:
    run = root / name
    run.mkdir(parents=True)
    lines = []
    for i in range(rows):
        if i < 50:
            value = sps / 10  # warm-up: must not reach the window
        elif i < rows - 100:
            value = sps * 2  # before the window: must not reach it either
        else:
            value = sps + (SPREAD if i % 2 else -SPREAD)
        row = {"schema_version": 1, "iteration": i, "env_steps": i * num_envs, "time": 1.0 + i,
               "iteration_ms": None if i == rows - 1 else 10.0, "env_steps_per_s": value,
               "learner_train_ms": 4.0, "learner_wait_for_collector_ms": 1.0, "learner_inference_ms": 0.5,
               "collector_env_step_ms": 3.0, "collector_backend_step_ms": 2.5, "collector_replay_write_ms": 0.25,
               "collector_wait_for_action_ms": 0.75,
               "ingress_backpressure": float(i // backpressure_every) if backpressure_every else 0.0,
               "nan_guard_trips": float(nan_trips if i == rows - 1 else 0), "replay_size": 1000.0 * i}
        lines.append(json.dumps(row))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if effective == "auto":
        effective = mode
    sharing = {"schema_version": 1, "configured": mode, "effective": effective, "validated": mode is not None,
               "backend": "mjwarp", "platform": "linux", "learner_device": "cuda:0", "collector_device": "cuda:0",
               "daemon_reachable": daemon_reachable or mode is not None,
               "client_pids": {"learner": 101, "collector": 102} if clients and effective else {},
               "server_pid": 900 if effective else None, "probed_at": "2026-11-29T00:00:00+00:00"}
    (run / "runtime_manifest.json").write_text(json.dumps(
        {"schema_version": 1, "run_dir": str(run), "algo": algo, "task": task, "backend": "mjwarp",
         "cuda_process_sharing": sharing, "ranks": []}))
    (run / "run_summary.json").write_text(json.dumps(
        {"schema_version": 1, "status": status, "cause": None if status == "completed" else "the learner raised",
         "iterations": rows, "wall_s": 100.0}))
    (run / "run_config.json").write_text(json.dumps(
        {"algo": {"name": algo, "max_iterations": ITERATIONS}, "task": {"name": task, "num_envs": num_envs},
         "sim": {"backend": "mjwarp"},
         "training": {"run": {"seed": seed, "run_name": name, "log_dir": str(root)},
                      "mps": {"cuda_process_sharing": mode, "block_ambient_mps": blocked}}}))
    return run


STATUS_CODE = {"completed": 0, "failed": 1, "refused": 2, "interrupted": 130}


def _overrides(argv: list[str]) -> dict[str, str]:
    out, i = {}, 0
    while i < len(argv):
        if argv[i] in ("--algo", "--task"):
            out[argv[i][2:]] = argv[i + 1]
            i += 1
        elif "=" in argv[i]:
            key, _, value = argv[i].partition("=")
            out[key.lstrip("+")] = value
        i += 1
    return out


def fake_train(argv: list[str], env: dict[str, str]) -> int:
    """What `train -m` would leave behind for one gate job (argv without the program): its exit status."""
    if "--dry-run" in argv:  # the gate's check of its commands
        return 0
    spec = json.loads(env.get("FAKE_GATE_SPEC") or "{}")
    o = _overrides(argv)
    if spec.get("calls"):
        with open(spec["calls"], "a") as f:
            f.write(json.dumps({"argv": argv, "mps_pipe": env.get("CUDA_MPS_PIPE_DIRECTORY")}) + "\n")
    case, arm, seed = f"{o['algo']}_{o['task']}", o["execution"], int(o["training.run.seed"])
    outcome = spec.get("outcome", {}).get(f"{case}/{arm}/{seed}", "completed")
    if outcome == "refused":
        return STATUS_CODE["refused"]
    if outcome == "wait":
        stopped = []
        signal.signal(signal.SIGINT, lambda *_: stopped.append(1))
        marker = Path(o["training.run.log_dir"]) / f"{o['training.run.run_name']}.waiting"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("waiting")
        while not stopped:
            time.sleep(0.05)
        outcome = "interrupted"
    sps = spec.get("sps", {}).get(case, [50_000, 62_000])[arm == "mps"]
    mode = "mps" if arm == "mps" else None
    make_run(Path(o["training.run.log_dir"]), o["training.run.run_name"], mode=mode, sps=sps, seed=seed,
             rows=int(o["algo.max_iterations"]), status=outcome, algo=o["algo"], task=o["task"],
             num_envs=int(o["task.num_envs"]), blocked=True,
             effective=mode if env.get("CUDA_MPS_PIPE_DIRECTORY") else None)
    return STATUS_CODE[outcome]


if __name__ == "__main__":
    sys.exit(fake_train(sys.argv[1:], dict(os.environ)))
