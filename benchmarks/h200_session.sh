#!/usr/bin/env bash
# One device session on two H200s (kind nvidia-h200-x2), everything the open issues measure:
#   setsid nohup bash benchmarks/h200_session.sh start > /tmp/session/start.log 2>&1 &
#                                             # GPU checks, 2-GPU DP A/B, unilab mps, then the two queues below
#   bash benchmarks/h200_session.sh wait S    # follow the logs for up to S seconds (calls are <= 10 min)
#   bash benchmarks/h200_session.sh collect   # results -> $OUT/session.tgz
# Single pieces (e.g. on one H200): `checks`, `mps` (per-GPU daemons), `gate ALGO TASK ENVS THRESHOLD [KEY=VALUE..]`,
#   `side-by-side ALGO TASK ENVS` (both roles flat out as MPS clients, then the coupled bound).
# One H200 (kind nvidia-h200): `setsid nohup bash benchmarks/h200_session.sh single > /tmp/session/single.log 2>&1 &`
#   runs checks, env throughput, each role alone (plus a kernel profile), then both gates, on GPU 0;
#   `... h200_session.sh priority > /tmp/session/single.log ...`: MPS runs with a below-normal vs a normal
#   collector (training.mps_client_priority), then each role alone; `session4`: compiled FlashSAC alone,
#   side-by-side bounds (roles_alone.py --side-by-side), FlashSAC gate (seed 1), FastSAC inductor tuning;
#   `session5`: FastSAC alone, MPS runs with SM shares (mps_sweep), the FlashSAC tracking gate (2 seeds);
#   `session6`: the FastSAC learner alone (no env, with a kernel profile), then the FastSAC walk flat gate;
#   `session6-learn`: a 400 s FastSAC walk flat learning run (4096 envs, MPS), then a 4096-env A/B (seed 1).
# GPU 0 queue: the MPS gate (FastSAC walk flat, FlashSAC tracking), FlashSAC walk flat A/B, each role
#              alone, env throughput. GPU 1 queue: the two 15 min learning runs (two segments each,
#              joined by training.resume), side by side under MPS.
# Daemons: one for both GPUs for the DP runs (one launcher = one environment = one pipe directory),
# then one per GPU from `unilab mps start --gpu N` (pinned by UUID) for the two independent queues.
set -u
S=/tmp/session
mkdir -p "$S"
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/devsite:$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T="python3 -m unilab.cli.train"
U="python3 -m unilab.cli.tools"
log() { echo "=== $(date +%T) $*"; }
SIMX=$(cat "$S/simx" 2>/dev/null || true)  # sim overrides decided by the GPU checks

gpu_checks() {
  log host; nvidia-smi -L; nvidia-smi --query-gpu=name,uuid,driver_version,compute_mode --format=csv,noheader
  python3 -c "import torch, warp, mujoco_warp; print('torch', torch.__version__, 'warp', warp.__version__)"
  log "GPU tests: captured task step == eager; compiled FastSAC passes in the update graph"
  if timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_task_graph_cuda.py > "$S/test_task_graph.log" 2>&1; then
    echo "" > "$S/simx"
  else
    echo "sim.task_cuda_graph=false" > "$S/simx"; echo "TASK GRAPH TEST FAILED: runs use sim.task_cuda_graph=false"
  fi
  tail -3 "$S/test_task_graph.log"
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_fastsac.py tests/test_flashsac.py -k cuda \
    > "$S/test_learners_cuda.log" 2>&1; tail -3 "$S/test_learners_cuda.log"
  SIMX=$(cat "$S/simx")
}

dp_ab() {  # issue 7: 2 ranks, default vs MPS, one daemon serving both GPUs
  mkdir -p /tmp/mps/pipe /tmp/mps/log
  CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log nvidia-cuda-mps-control -d
  local A="--algo fastsac --task g1_walk_flat training.devices=[0,1] task.num_envs=2048 algo.max_iterations=200 algo.save_interval=100000 training.log_dir=/tmp/dp $SIMX"
  for mode in default mps; do
    log "DP $mode"
    CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log timeout 240 $T $A \
      training.run_name=dp_$mode training.block_ambient_mps=true +execution=$mode > "$S/dp_$mode.log" 2>&1
    echo "rc=$?"; tail -2 "$S/dp_$mode.log"
    [ "$mode" = mps ] && echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe nvidia-cuda-mps-control
  done
  echo quit | CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe nvidia-cuda-mps-control; sleep 2
}

mps_tool() {  # issue 6: the tool against the real binary
  log "unilab mps"
  $U mps start --gpu 0; echo "start gpu0 rc=$?"
  $U mps start --gpu 1; echo "start gpu1 rc=$?"
  $U mps start --gpu 0; echo "second start on gpu0 (must refuse) rc=$?"
  $U mps status; $U mps env --gpu 1
  (eval "$($U mps env --gpu 0)"; $U mps doctor +execution=mps training.device=cuda:0; echo "doctor rc=$?")
}

gate() {  # algo task envs threshold [extra overrides, the same in both arms]
  local name=$1_$2
  log "gate $name ${*:5}"
  (eval "$($U mps env --gpu 0)"
   $T -m +execution=default,mps +bench=offpolicy_gate --algo $1 --task $2 training.device=cuda:0 \
     task.num_envs=$3 training.log_dir=/tmp/gate/$name $SIMX "${@:5}" > "$S/gate_$name.log" 2>&1
   echo "multirun rc=$?")
  $U bench compare /tmp/gate/$name --threshold-pct $4 --plot "$S/gate_$name.png" > "$S/gate_$name.txt" 2>&1
  $U bench compare /tmp/gate/$name --threshold-pct $4 --json > "$S/gate_$name.json" 2>&1
  cat "$S/gate_$name.txt"
  # the two arms of seed 1: only the mode may differ (run_name/log paths are per run anyway)
  local pair; pair=$(python3 - /tmp/gate/$name <<'PY'
import json, pathlib, sys
runs = {}
for d in sorted(pathlib.Path(sys.argv[1]).glob("2*")):
    t = json.loads((d / "run_config.json").read_text())["training"]
    runs[(t["cuda_process_sharing"], t["seed"])] = str(d)
print(runs.get((None, 1), ""), runs.get(("mps", 1), ""))
PY
)
  $U config diff $pair > "$S/gate_${name}_diff.txt" 2>&1; echo "config diff rc=$?"; cat "$S/gate_${name}_diff.txt"
}

env_tables() {  # env throughput with the captured and the eager task step, GPU 0, no MPS
  log "env throughput (GPU 0)"
  local g uuid0; uuid0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
  for g in "" --no-task-graph; do
    CUDA_VISIBLE_DEVICES=$uuid0 timeout 240 python3 benchmarks/env_throughput.py --tasks g1_walk_flat g1_motion_tracking \
      --envs 2048 4096 --iters 100 $g --json "$S/env${g:+_eager}.json" 2>&1 | grep -E "\||graph"
  done
}

roles() {  # "ALGO TASK ENVS [KEY=VALUE]"...: each role alone on GPU 0 (no MPS), plus a kernel profile of the cycle
  log "roles alone (GPU 0, no MPS)"
  local spec tag uuid0; uuid0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
  for spec in "$@"; do
    set -- $spec
    tag="$1_$2_$3${4:+_eager}"
    CUDA_VISIBLE_DEVICES=$uuid0 timeout 300 python3 benchmarks/roles_alone.py --algo $1 --task $2 --envs $3 \
      --set ${4:-} $SIMX --json "$S/roles_$tag.json" --profile "$S/profile_$tag.txt" 2>&1 | grep -E "ms|per_s|Error"
  done
}

gpu0_queue() {
  gate fastsac g1_walk_flat 2048 20
  gate flashsac g1_motion_tracking 2048 10
  gate flashsac g1_walk_flat 4096 10
  roles "fastsac g1_walk_flat 2048" "fastsac g1_walk_flat 2048 algo.compile=false" \
        "flashsac g1_motion_tracking 2048" "flashsac g1_walk_flat 4096"
  env_tables
  log "gpu0 queue done"
}

single_queue() {  # everything still open, on one H200
  gpu_checks
  env_tables
  roles "fastsac g1_walk_flat 2048" "fastsac g1_walk_flat 2048 algo.compile=false" "flashsac g1_motion_tracking 2048"
  $U mps start --gpu 0; echo "mps start rc=$?"
  gate flashsac g1_motion_tracking 2048 10
  gate fastsac g1_walk_flat 2048 20
  $U mps stop --gpu 0
  log "single queue done"
}

priority_queue() {  # session 4, one H200: does a below-normal collector bring the MPS iteration to the learner's own?
  $U mps start --gpu 0; echo "mps start rc=$?"
  # MPS runs (seed 1) with the collector at below-normal, then normal priority
  mps_sweep prio_fastsac_g1_walk_flat fastsac g1_walk_flat 2048 training.mps_client_priority.collector=below_normal,null
  mps_sweep prio_flashsac_g1_motion_tracking flashsac g1_motion_tracking 2048 \
    training.mps_client_priority.collector=below_normal,null
  $U mps stop --gpu 0
  roles "flashsac g1_motion_tracking 2048" "fastsac g1_walk_flat 2048"
  log "single queue done"
}

side_by_side() {  # algo task envs: both roles flat out and uncoupled as MPS clients, then the coupled bound
  local tag=$1_$2_$3 d=/tmp/side_$1_$2_$3 r
  log "side by side $tag (MPS clients of GPU 0's daemon)"
  rm -rf "$d"; mkdir -p "$d"
  (eval "$($U mps env --gpu 0)"
   for r in learner collector; do
     timeout 420 python3 benchmarks/roles_alone.py --algo $1 --task $2 --envs $3 --role $r --side-by-side "$d" \
       --seconds 20 > "$S/side_${tag}_$r.log" 2>&1 &
   done
   # while they run: both must be clients of the server, or the numbers are time-slicing's
   while [ ! -f "$d/learner.ready" ] || [ ! -f "$d/collector.ready" ]; do sleep 2; done; sleep 5
   for srv in $(echo get_server_list | nvidia-cuda-mps-control); do
     echo "server $srv clients: $(echo "get_client_list $srv" | nvidia-cuda-mps-control | tr '\n' ' ')"; done
   wait)
  tail -1 "$S/side_${tag}_learner.log"; tail -1 "$S/side_${tag}_collector.log"
  python3 benchmarks/roles_alone.py --bound "$d" --alone "$S/roles_$tag.json" | tee "$S/bound_$tag.json"
}

session4_queue() {  # one H200: compiled FlashSAC, side-by-side bounds, FastSAC inductor tuning
  roles "flashsac g1_motion_tracking 2048"
  $U mps start --gpu 0; echo "mps start rc=$?"
  side_by_side flashsac g1_motion_tracking 2048
  gate flashsac g1_motion_tracking 2048 10 training.seed=1
  roles "fastsac g1_walk_flat 2048"
  log "fastsac alone with inductor coordinate-descent tuning"
  local uuid0; uuid0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
  CUDA_VISIBLE_DEVICES=$uuid0 TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 timeout 400 python3 benchmarks/roles_alone.py \
    --algo fastsac --task g1_walk_flat --envs 2048 --json "$S/roles_fastsac_cdt.json" 2>&1 | grep -E "ms|Error"
  side_by_side fastsac g1_walk_flat 2048
  log "fastsac MPS, collector at 50 % of the SMs and below-normal priority"
  (eval "$($U mps env --gpu 0)"
   $T +execution=mps +bench=offpolicy_gate --algo fastsac --task g1_walk_flat training.device=cuda:0 task.num_envs=2048 \
     training.mps_active_thread_percentage.collector=50 training.mps_client_priority.collector=below_normal \
     training.log_dir=/tmp/gate/fastsac_c50_low > "$S/fastsac_c50_low.log" 2>&1; echo "rc=$?")
  $U bench extract /tmp/gate/fastsac_c50_low/2* | head -16
  $U mps stop --gpu 0
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_flashsac.py -k cuda > "$S/test_flashsac_cuda.log" 2>&1
  tail -2 "$S/test_flashsac_cuda.log"
  log "single queue done"
}

mps_sweep() {  # name algo task envs overrides...: MPS-only runs (seed 1; a comma in an override sweeps it)
  local name=$1 d
  log "MPS sweep $name ${*:5}"
  (eval "$($U mps env --gpu 0)"
   $T -m +execution=mps +bench=offpolicy_gate --algo $2 --task $3 training.device=cuda:0 task.num_envs=$4 \
     training.seed=1 training.log_dir=/tmp/gate/$name $SIMX "${@:5}" > "$S/$name.log" 2>&1
   echo "multirun rc=$?")
  for d in /tmp/gate/$name/2*; do
    python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['training']; print('threads', t['mps_active_thread_percentage'], 'priority', t['mps_client_priority'])" "$d/run_config.json"
    $U bench extract "$d" > "$S/${name}_$(basename "$d").txt" 2>&1; grep -E "iteration_ms|env_steps_per_s|learner_train_ms|collector_env_step_ms" "$S/${name}_$(basename "$d").txt"
  done
}

session5_queue() {  # one H200: replay rows gathered inside the compiled losses; SM shares for the faster role
  roles "fastsac g1_walk_flat 2048"
  $U mps start --gpu 0; echo "mps start rc=$?"
  mps_sweep fastsac_cthreads fastsac g1_walk_flat 2048 training.mps_active_thread_percentage.collector=100,35,20
  gate flashsac g1_motion_tracking 2048 10
  mps_sweep flashsac_track_lthreads flashsac g1_motion_tracking 2048 training.mps_client_priority.learner=below_normal \
    training.mps_active_thread_percentage.learner=100,50,30
  mps_sweep flashsac_walk_lthreads flashsac g1_walk_flat 4096 training.mps_client_priority.learner=below_normal \
    training.mps_active_thread_percentage.learner=50,30
  $U mps stop --gpu 0
  roles "flashsac g1_motion_tracking 2048" "flashsac g1_walk_flat 4096"
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_fastsac.py tests/test_flashsac.py -k cuda \
    > "$S/test_learners_cuda.log" 2>&1; tail -2 "$S/test_learners_cuda.log"
  log "single queue done"
}

session6_queue() {  # one H200: FastSAC's GEMM widths padded to multiples of 8, bias added after the matmul
  log "FastSAC learner alone (no env), with a kernel profile"
  python3 benchmarks/roles_alone.py --algo fastsac --task g1_walk_flat --envs 2048 --dims 98,106,29 \
    --profile "$S/profile_fastsac6.txt" --json "$S/learner_fastsac6.json" > "$S/learner_fastsac6.log" 2>&1
  grep learner_update_cycle_ms "$S/learner_fastsac6.json"
  $U mps start --gpu 0; echo "mps start rc=$?"
  gate fastsac g1_walk_flat 2048 10
  $U mps stop --gpu 0
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_fastsac.py -k cuda \
    > "$S/test_learners_cuda.log" 2>&1; tail -2 "$S/test_learners_cuda.log"
  log "single queue done"
}

session6_learn_queue() {  # one H200: FastSAC walk flat learning with the current code (one segment), then 4096 envs A/B
  $U mps start --gpu 0; echo "mps start rc=$?"
  log "learning run walk6 (FastSAC, 4096 envs, MPS, 400 s)"
  (eval "$($U mps env --gpu 0)"
   timeout -s TERM 400 $T --algo fastsac --task g1_walk_flat training.device=cuda:0 task.num_envs=4096 \
     algo.max_iterations=10000000 algo.save_interval=1000 training.log_dir=/tmp/learn +execution=mps \
     training.run_name=walk6 $SIMX > "$S/learn_walk6.log" 2>&1; echo "walk6 rc=$?")
  tail -3 /tmp/learn/walk6/run_summary.json 2>/dev/null; tail -c 400 /tmp/learn/walk6/metrics.jsonl; echo
  gate fastsac g1_walk_flat 4096 10 training.seed=1
  $U mps stop --gpu 0
  log "single queue done"
}

learn() {  # name algo task envs keys...
  local name=$1 algo=$2 task=$3 envs=$4; shift 4
  (eval "$($U mps env --gpu 1)"
   local A="--algo $algo --task $task training.device=cuda:0 task.num_envs=$envs algo.max_iterations=10000000 algo.save_interval=1000 training.log_dir=/tmp/learn +execution=mps $SIMX"
   timeout -s TERM 450 $T $A training.run_name=$name > "$S/learn_${name}_1.log" 2>&1; echo "$name segment 1 rc=$?"
   timeout -s TERM 450 $T $A training.resume=/tmp/learn/$name > "$S/learn_${name}_2.log" 2>&1; echo "$name segment 2 rc=$?")
  python3 benchmarks/plot_run.py /tmp/learn/$name --out "$S/learn_$name.png" --keys "$@" 2>&1 | tail -2
}

gpu1_queue() {
  learn walk fastsac g1_walk_flat 4096 episode_length episode_return rew/track_lin_vel_xy rew/track_ang_vel_z &
  learn track flashsac g1_motion_tracking 2048 episode_length episode_return metrics/body_pos_error metrics/anchor_pos_error &
  wait
  log "gpu1 queue done"
}

case "${1:-}" in
  start)
    gpu_checks
    dp_ab
    mps_tool
    setsid nohup bash "$0" gpu1 > "$S/gpu1.log" 2>&1 < /dev/null &
    setsid nohup bash "$0" gpu0 > "$S/gpu0.log" 2>&1 < /dev/null &
    sleep 2; log "queues started" ;;
  checks) gpu_checks ;;
  mps) mps_tool ;;
  gate) shift; gate "$@" ;;
  side-by-side) shift; side_by_side "$@" ;;  # ALGO TASK ENVS; needs $S/roles_ALGO_TASK_ENVS.json (roles_alone.py --json) and a daemon
  gpu0) gpu0_queue ;;
  gpu1) gpu1_queue ;;
  single) single_queue ;;
  priority) priority_queue ;;
  session4) session4_queue ;;
  session5) session5_queue ;;
  session6) session6_queue ;;
  session6-learn) session6_learn_queue ;;
  wait)
    end=$(( $(date +%s) + ${2:-500} ))
    while [ "$(date +%s)" -lt "$end" ]; do
      grep -q "gpu0 queue done" "$S/gpu0.log" 2>/dev/null && grep -q "gpu1 queue done" "$S/gpu1.log" 2>/dev/null && break
      grep -q "single queue done" "$S/single.log" 2>/dev/null && break
      sleep 10
    done
    [ -f "$S/single.log" ] && { log "single"; tail -40 "$S/single.log"; }
    log "start"; tail -30 "$S/start.log" 2>/dev/null; log "gpu0"; tail -25 "$S/gpu0.log" 2>/dev/null
    log "gpu1"; tail -8 "$S/gpu1.log" 2>/dev/null
    for f in /tmp/learn/*/metrics.jsonl; do [ -f "$f" ] && echo "$f $(wc -l < "$f") $(tail -1 "$f" | cut -c1-300)"; done ;;
  collect)
    $U mps stop --gpu 0; [ "$(nvidia-smi -L | wc -l)" -gt 1 ] && $U mps stop --gpu 1; $U mps status
    tar -czf "$OUT/session.tgz" --exclude='*.pt' --exclude='tensorboard' "$S" /tmp/dp /tmp/gate /tmp/learn 2>/dev/null
    ls -la "$OUT" ;;
  *) echo "usage: $0 start|single|priority|session4|session5|session6|session6-learn|wait S|collect|checks|mps|gate ALGO TASK ENVS THRESHOLD [KEY=VALUE..]|side-by-side ALGO TASK ENVS"; exit 2 ;;
esac
