#!/usr/bin/env bash
# A/B session on the H200: FastSAC walk flat and FlashSAC motion tracking, default vs MPS,
# plus each role alone and the env throughput table. Logs and JSON go to $OUT.
#   bash benchmarks/h200_ab.sh ITERS
set -u
ITERS=${1:-200}
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/devsite:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log() { echo "=== $(date +%T) $*"; }
log host; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
log env-throughput
timeout 200 python3 benchmarks/env_throughput.py --tasks g1_walk_flat --envs 2048 4096 8192 --iters 50 \
  --json "$OUT/env_walk.json" 2>&1 | grep "|"
timeout 90 python3 benchmarks/env_throughput.py --tasks g1_motion_tracking --envs 2048 4096 --iters 50 \
  --json "$OUT/env_track.json" 2>&1 | grep "|"
run() {  # mode algo task envs name
  timeout 120 python3 -m unilab.cli.train --algo $2 --task $3 training.device=cuda:0 task.num_envs=$4 \
    algo.max_iterations=$ITERS algo.save_interval=100000 training.log_dir=/tmp/runs training.run_name=$5 \
    training.stall_timeout_s=60 +execution=$1 > "/tmp/$5.log" 2>&1; echo "$5 rc=$?"; tail -2 "/tmp/$5.log"
}
ab() {  # algo task envs
  run default $1 $2 $3 ${1}_${3}_default
  mkdir -p /tmp/mps/pipe /tmp/mps/log
  CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log nvidia-cuda-mps-control -d
  CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log run mps $1 $2 $3 ${1}_${3}_mps
  echo quit | CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe nvidia-cuda-mps-control; sleep 1
}
log fastsac; ab fastsac g1_walk_flat 2048
log flashsac; ab flashsac g1_motion_tracking 2048
log roles-alone
timeout 60 python3 benchmarks/roles_alone.py --algo fastsac --task g1_walk_flat --envs 2048 --json "$OUT/roles_fastsac.json" | grep -E "ms|per_s"
timeout 60 python3 benchmarks/roles_alone.py --algo flashsac --task g1_motion_tracking --envs 2048 --json "$OUT/roles_flashsac.json" | grep -E "ms|per_s"
log extract
python3 - <<'PY' | tee "$OUT/ab.txt"
import json, glob, os, statistics as st
keys = ["iteration_ms", "env_steps_per_s", "learner_train_ms", "learner_wait_for_collector_ms", "learner_inference_ms",
        "collector_env_step_ms", "collector_backend_step_ms", "collector_replay_write_ms", "collector_wait_for_action_ms",
        "ingress_backpressure", "nan_guard_trips"]
for run in sorted(glob.glob("/tmp/runs/*")):
    rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    tail = rows[-100:] if len(rows) >= 150 else rows[len(rows) // 3:]
    m = json.load(open(f"{run}/runtime_manifest.json"))["cuda_process_sharing"]
    s = json.load(open(f"{run}/run_summary.json"))["status"]
    vals = {k: round(st.mean([r[k] for r in tail if r.get(k) is not None] or [float("nan")]), 3) for k in keys}
    print(os.path.basename(run), s, "effective", m["effective"], "clients", m["client_pids"], len(rows), vals)
PY
tar -C /tmp/runs -czf "$OUT/runs.tgz" --exclude='*.pt' --exclude='tensorboard' .
log done
