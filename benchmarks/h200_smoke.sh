#!/usr/bin/env bash
# One GPU session on the H200 (device tool): learner CUDA tests, env throughput, FastSAC A/B
# (default vs MPS) and each role alone. Logs go to $OUT. Usage: bash benchmarks/h200_smoke.sh [ENVS] [ITERS]
set -u
ENVS=${1:-2048}; ITERS=${2:-300}
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/devsite:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log() { echo "=== $(date +%T) $*"; }
log host; nvidia-smi --query-gpu=name,uuid,driver_version,compute_mode --format=csv
log learner-cuda-tests
timeout 150 python3 -m pytest tests/test_fastsac.py -q -p no:cacheprovider -k cuda 2>&1 | tail -4
log env-throughput
timeout 240 python3 benchmarks/env_throughput.py --envs 1024 4096 8192 --iters 100 --json "$OUT/env.json" 2>&1 | tail -12
run() {  # mode name extra...
  local mode=$1 name=$2; shift 2
  timeout 170 python3 -m unilab.cli.train --algo fastsac --task g1_walk_flat training.device=cuda:0 \
    task.num_envs=$ENVS algo.max_iterations=$ITERS algo.save_interval=100000 training.log_dir=/tmp/runs \
    training.run_name=$name training.stall_timeout_s=60 +execution=$mode "$@" > "$OUT/$name.log" 2>&1
  echo "rc=$?"; tail -4 "$OUT/$name.log"
}
log train-default; run default fastsac_default
mkdir -p /tmp/mps/pipe /tmp/mps/log
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log
log mps-daemon; nvidia-cuda-mps-control -d; sleep 1; ls -la /tmp/mps/pipe; echo get_server_list | nvidia-cuda-mps-control; echo "(servers above)"
log train-mps; run mps fastsac_mps
python3 -c "import json;m=json.load(open('/tmp/runs/fastsac_mps/runtime_manifest.json'));print(json.dumps(m['cuda_process_sharing'],indent=1))"
echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
log roles-alone
timeout 120 python3 benchmarks/roles_alone.py --algo fastsac --task g1_walk_flat --envs $ENVS --json "$OUT/roles.json" 2>&1 | tail -14
log extract
for r in fastsac_default fastsac_mps; do python3 - "$r" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(f"/tmp/runs/{sys.argv[1]}/metrics.jsonl")]
tail = rows[len(rows) // 3:]
keys = ["iteration_ms", "env_steps_per_s", "learner_train_ms", "learner_wait_for_collector_ms", "learner_inference_ms",
        "collector_env_step_ms", "collector_backend_step_ms", "collector_replay_write_ms", "collector_wait_for_action_ms"]
print(sys.argv[1], len(rows), {k: round(st.mean([r[k] for r in tail if r.get(k) is not None] or [float('nan')]), 3) for k in keys})
PY
done
cp /tmp/runs/fastsac_mps/runtime_manifest.json "$OUT/manifest_mps.json" 2>/dev/null
log done
