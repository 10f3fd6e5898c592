"""Fake run directories (metrics.jsonl, manifest, summary, config) for the tests of `unilab bench`."""

from __future__ import annotations

import json
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
         "training": {"cuda_process_sharing": mode, "seed": seed, "run_name": name, "log_dir": str(root),
                      "block_ambient_mps": blocked}}))
    return run
