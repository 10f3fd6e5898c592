#!/usr/bin/env bash
# The benchmark commands of a GPU session, one subcommand each. Run from anywhere; it works in the
# repository root. PYTHONPATH comes from the environment (e.g. `export PYTHONPATH=/path/to/deps:$PWD`).
#
#   bash benchmarks/gpu_session.sh [--dry-run] [--out DIR] SUBCOMMAND [OPTIONS] [-- KEY=VALUE ...]
#
# Subcommands (overrides after `--` go to every `train` command of the subcommand, in both arms):
#   checks                              host, versions, the GPU tests (captured task step == eager; learners on CUDA)
#   mps-start [--gpu G]                 `unilab mps start --gpu G` (a daemon pinned to GPU G)
#   mps-stop  [--gpu G]                 `unilab mps stop --gpu G --timeout 60`
#   mps-start --raw / mps-stop --raw    one plain daemon for all GPUs, pipe /tmp/mps/pipe (nvidia-cuda-mps-control)
#   mps-check [--gpus 0,1]              `unilab mps start/status/env/doctor` against the real control binary
#                                       (the daemons stay up: mps-stop --gpu G for each)
#   gate --algo A --task T --envs N [--seeds K | --seed S] [--threshold P] [--arms default,mps] [--name X] [--gpu G]
#                                       the A/B gate (+bench=offpolicy_gate) under GPU G's daemon (mps-start first),
#                                       then `unilab bench compare` and the config diff of one seed's two arms;
#                                       with one arm (--arms mps) a sweep: `unilab bench extract` per run
#   matrix [--cases A,B] [--name X] [--gpu G]
#                                       the whole gate, `unilab bench gate` (every case, both arms, 2 seeds each, the
#                                       verdict) under GPU G's daemon (mps-start first), into DIR/matrix[_X];
#                                       longer than a device command: start it with `bg`, then `wait`
#   ab --algo A --task T --envs N [--iters 200] [--devices 0,1] [--name X]
#                                       plain runs (no preset), default vs MPS, under a raw daemon it starts and quits;
#                                       --devices: data parallel over those GPUs (training.run.devices=[...])
#   env [--gpu G] [--tag X] ARGS...     python3 benchmarks/env_throughput.py ARGS (no MPS); --json defaults to
#                                       DIR/env[_X][_eager].json
#   alone [--gpu G] [--tag X] ARGS...   python3 benchmarks/roles_alone.py ARGS (no MPS); --json defaults to
#                                       DIR/roles_ALGO_TASK_ENVS[_X].json (what side-by-side reads)
#                                       (env, alone: --timeout S, default 300; every other argument is the tool's)
#   side-by-side --algo A --task T --envs N [--seconds 20] [--gpu G]
#                                       both roles flat out as clients of GPU G's daemon, then the coupled bound
#   learn --algo A --task T --envs N --name X --seconds S [--segments K] [--execution mps] [--gpu G] [--keys "k ..."]
#                                       a learning run, detached (setsid nohup): K segments of S s each, ended by
#                                       SIGTERM through timeout and joined by training.run.resume, then `unilab plot`;
#                                       call it once per run to put several side by side under one daemon
#   batch SPEC --algo A --task T --envs N [--gpu G] [--warm-first]
#                                       learning runs side by side under GPU G's daemon (mps-start first), one `learn`
#                                       of one segment per line of SPEC: NAME SECONDS OVERRIDE... ('#' comments;
#                                       $CLIPS in a line: the imported clips, default ~/.cache/unilab/motions/imported;
#                                       $LIFTED: the same lifted to the floor, default ~/.cache/unilab/motions/lifted;
#                                       $SPLIT: a held-out split of them (unilab motion split), default ~/.cache/unilab/motions/split;
#                                       overrides after `--` go to every run); then `wait`, then `evals`.
#                                       --warm-first: `unilab warmup` with the first line's overrides before the runs
#                                       start, so they share one compile (five runs compiling at once from cold caches
#                                       took seven minutes to their first iteration, four after a warmup 2.5-3.2 min:
#                                       the learners' builds; a line of another network width compiles its own update;
#                                       a run's SECONDS exclude the warmup)
#   evals [--gpu G] [--envs-per-clip K] [NAME ...]
#                                       `unilab eval` (tracking) of the `learn` runs of DIR (or the NAMEs) in parallel
#                                       under GPU G's daemon, then one line per run: its eval, the rows it wrote after
#                                       an earlier run stopped, fault lines in its logs; each run's metrics thinned to
#                                       500 rows in DIR/curves/NAME (small to copy off the machine; `unilab plot`)
#   soak --algo A --task T --envs N --seconds S [--execution mps] [--gpu G] [--name X] [--interval 60] [--warmup auto|S]
#                                       a run of S seconds (then SIGINT) that benchmarks/soak_sample.py starts and
#                                       samples every --interval s (RSS, GPU memory per process), then its --report
#                                       (growth <= 2 %); longer than a device command: start it with `bg`, then `wait`
#   faults --algo A --task T --envs N [--gpu G]
#                                       under GPU G's daemon (mps-start first): kill -9 of the learner mid-run, then
#                                       kill -9 of the MPS server mid-run; for each the time from the kill to the
#                                       launcher's exit, its exit status and the run's cause; then two runs side by
#                                       side under the daemon and SIGINT to one: the other must go on (its rows grow);
#                                       benchmarks/faults.py runs them
#   bg NAME SUBCOMMAND ...              any subcommand detached (setsid nohup), log DIR/NAME.log
#   wait [SECONDS]  (= learn --wait S)  follow the detached jobs until they end or SECONDS pass (default 500)
#   collect                             DIR and the run folders (no checkpoints) -> $OUT/session.tgz
#
# --dry-run prints the commands instead of running them (TRAIN, UNILAB, JOBS, PYTHON choose how they are spelled:
# default `python3 -m unilab.cli.train`, `python3 -m unilab.cli.tools`, `python3 -m unilab.jobs`, `python3`).
# gate, learn and ab start each `train` as a job of unilab's job runner (JOBS): its own session, its log, its
# timeout, Ctrl-C or SIGTERM passed on to the run. DIR (--out, or
# $SESSION_DIR) defaults to /tmp/session: logs, JSON, plots. Run folders: /tmp/gate/NAME, /tmp/learn/NAME,
# /tmp/NAME (ab); LEARN_DIR moves /tmp/learn. A device command may run 10 minutes: start long work with `bg` or `learn`, then `wait`.
# docs/history/performance.md ("What each set ran") lists what past sessions ran with these subcommands.
set -u
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.." || exit 2
ME=benchmarks/$(basename "$SELF")  # how detached jobs call it again (from the repository root)
PYTHON=${PYTHON:-python3}
read -r -a TRAIN_CMD <<< "${TRAIN:-$PYTHON -m unilab.cli.train}"
read -r -a UNILAB_CMD <<< "${UNILAB:-$PYTHON -m unilab.cli.tools}"
read -r -a JOBS_CMD <<< "${JOBS:-$PYTHON -m unilab.jobs}"
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast off
RAW_PIPE=/tmp/mps/pipe RAW_LOG=/tmp/mps/log

S=${SESSION_DIR:-/tmp/session}
LEARN_DIR=${LEARN_DIR:-/tmp/learn}
CLIPS=${CLIPS:-$HOME/.cache/unilab/motions/imported}
LIFTED=${LIFTED:-$HOME/.cache/unilab/motions/lifted}  # benchmarks/fetch_motions.py --lift-to-floor
SPLIT=${SPLIT:-$HOME/.cache/unilab/motions/split}     # unilab motion split $CLIPS --held-out K --out $SPLIT
DRY=${DRY_RUN:-0}
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=1; shift ;;
    --out) S=$2; shift 2 ;;
    *) break ;;
  esac
done

# ---- printing and running ---------------------------------------------------------------------------
q() {  # words as one shell line; plain words stay unquoted
  local out="" a
  for a in "$@"; do
    if [[ -n $a && $a =~ ^[][A-Za-z0-9_./:=+@%,-]+$ ]]; then out+="${out:+ }$a"
    elif [[ $a != *"'"* ]]; then out+="${out:+ }'$a'"
    else out+="${out:+ }$(printf '%q' "$a")"; fi
  done
  printf '%s' "$out"
}
log() { if [ "$DRY" = 1 ]; then echo "# $*"; else echo "=== $(date +%T) $*"; fi; }
run() { if [ "$DRY" = 1 ]; then q "$@"; echo; else "$@"; fi; }
run_log() {  # LOG CMD...: stdout and stderr to LOG, then its exit status
  local out=$1 rc; shift
  if [ "$DRY" = 1 ]; then echo "$(q "$@") > $(q "$out") 2>&1"; return 0; fi
  "$@" > "$out" 2>&1; rc=$?; echo "rc=$rc ($(basename "$out"))"; return $rc
}
job() {  # LOG [--timeout S] [--env KEY=VALUE]... -- CMD...: CMD as one job of the runner, its console to LOG
  local out=$1; shift
  run "${JOBS_CMD[@]}" --log "$out" "$@"
}
note() { [ "$DRY" = 1 ] || echo "$*"; }
die() { echo "gpu_session.sh: $*" >&2; exit 2; }

require_daemon() {  # G: fail now, not in a detached job, where GPU G has no daemon from `unilab mps start`
  [ "$DRY" = 1 ] || "${UNILAB_CMD[@]}" mps env --gpu "$1" > /dev/null \
    || die "no daemon for GPU $1: run \`bash $ME mps-start --gpu $1\` first"
}
use_daemon() {  # G: this (sub)shell becomes a client of GPU G's daemon from `unilab mps start` (device 0 = GPU G)
  if [ "$DRY" = 1 ]; then echo "eval \"\$($(q "${UNILAB_CMD[@]}" mps env --gpu "$1"))\""; return 0; fi
  local exports
  exports=$("${UNILAB_CMD[@]}" mps env --gpu "$1") || die "no daemon for GPU $1: run \`bash $ME mps-start --gpu $1\` first"
  eval "$exports"
}
note_dir() {  # DIR: a run folder for `collect`
  [ "$DRY" = 1 ] && return
  mkdir -p "$S"; grep -qxF "$1" "$S/rundirs" 2>/dev/null || echo "$1" >> "$S/rundirs"
}
use_gpu() {  # G: no MPS, CUDA's device 0 = GPU G (nvidia-smi's index)
  if [ "$DRY" = 1 ]; then echo "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$1"; return 0; fi
  export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$1
}

# ---- options ------------------------------------------------------------------------------------------
ALGO="" TASK="" ENVS="" CASES="" GPU=0 GPUS="0,1" SEEDS="" SEED="" THRESHOLD="" ARMS="default,mps" NAME="" SECONDS_=""
SEGMENTS=1 EXECUTION=mps KEYS="" ITERS=200 DEVICES="" RAW=0 FOREGROUND=0 WAIT="" OVERRIDES=() INTERVAL=60 WARMUP=auto WARM_FIRST=0
parse() {  # the options of gate, ab, side-by-side, learn, mps-*
  while [ $# -gt 0 ]; do
    case $1 in
      --algo) ALGO=$2; shift ;;
      --task) TASK=$2; shift ;;
      --envs) ENVS=$2; shift ;;
      --cases) CASES=$2; shift ;;
      --gpu) GPU=$2; shift ;;
      --gpus) GPUS=$2; shift ;;
      --seeds) SEEDS=$2; shift ;;
      --seed) SEED=$2; shift ;;
      --threshold) THRESHOLD=$2; shift ;;
      --arms) ARMS=$2; shift ;;
      --name) NAME=$2; shift ;;
      --seconds) SECONDS_=$2; shift ;;
      --segments) SEGMENTS=$2; shift ;;
      --execution) EXECUTION=$2; shift ;;
      --keys) KEYS=$2; shift ;;
      --iters) ITERS=$2; shift ;;
      --interval) INTERVAL=$2; shift ;;
      --warmup) WARMUP=$2; shift ;;
      --devices) DEVICES=$2; shift ;;
      --raw) RAW=1 ;;
      --foreground) FOREGROUND=1 ;;
      --warm-first) WARM_FIRST=1 ;;
      --wait) WAIT=${2:-500}; [ $# -gt 1 ] && shift ;;
      --dry-run) DRY=1 ;;
      --) shift; OVERRIDES=("$@"); return ;;
      *) die "unknown option $1 (overrides go after --)" ;;
    esac
    shift
  done
}
need() { local v; for v in "$@"; do [ -n "${!v}" ] || die "$SUB needs --$(echo "$v" | tr 'A-Z_' 'a-z-' | sed 's/-$//')"; done; }

# ---- subcommands --------------------------------------------------------------------------------------
cmd_checks() {
  [ -n "${PYTHONPATH:-}" ] || note "PYTHONPATH is not set: the dependencies must be importable as they are (else export PYTHONPATH=<deps>:\$PWD)"
  log host
  run nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_mode --format=csv,noheader
  run "$PYTHON" -c 'import torch, warp, mujoco_warp, unilab; print("torch", torch.__version__, "warp", warp.__version__, "unilab", unilab.__file__)'
  log "GPU tests: captured task step == eager; learners on CUDA"
  run_log "$S/test_task_graph.log" timeout 300 "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_task_graph_cuda.py \
    || echo "TASK GRAPH TEST FAILED: measure with the override sim.task_cuda_graph=false (after --)"
  [ "$DRY" = 1 ] || tail -3 "$S/test_task_graph.log"
  run_log "$S/test_learners_cuda.log" timeout 300 "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_fastsac.py \
    tests/test_flashsac.py -k cuda
  [ "$DRY" = 1 ] || tail -3 "$S/test_learners_cuda.log"
}

cmd_mps_start() {
  if [ "$RAW" = 1 ]; then  # one daemon, all GPUs: what one data-parallel launcher needs (one pipe directory)
    run mkdir -p "$RAW_PIPE" "$RAW_LOG"
    run env CUDA_MPS_PIPE_DIRECTORY=$RAW_PIPE CUDA_MPS_LOG_DIRECTORY=$RAW_LOG nvidia-cuda-mps-control -d
  else
    run "${UNILAB_CMD[@]}" mps start --gpu "$GPU"
  fi
}
cmd_mps_stop() {
  if [ "$RAW" = 1 ]; then
    if [ "$DRY" = 1 ]; then echo "echo quit | env CUDA_MPS_PIPE_DIRECTORY=$RAW_PIPE nvidia-cuda-mps-control"; return; fi
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$RAW_PIPE nvidia-cuda-mps-control; sleep 2
  else
    run "${UNILAB_CMD[@]}" mps stop --gpu "$GPU" --timeout 60  # a daemon whose clients are still exiting answers late
  fi
}

cmd_mps_check() {  # the tool against the real binary: start, refuse a second start, status, env, doctor
  local g first=${GPUS%%,*} last=${GPUS##*,}
  log "unilab mps (GPUs $GPUS); the daemons stay up for the work after it (mps-stop --gpu G)"
  for g in ${GPUS//,/ }; do run "${UNILAB_CMD[@]}" mps start --gpu "$g"; note "start gpu $g rc=$?"; done
  run "${UNILAB_CMD[@]}" mps start --gpu "$first"; note "second start on gpu $first (must refuse) rc=$?"
  run "${UNILAB_CMD[@]}" mps status
  run "${UNILAB_CMD[@]}" mps env --gpu "$last"
  (use_daemon "$first"; run "${UNILAB_CMD[@]}" mps doctor +execution=mps training.run.device=cuda:0; note "doctor rc=$?")
}

seed_overrides() {  # --seed S: that seed; --seeds K: seeds 1..K (the preset's sweep is 1,2)
  if [ -n "$SEED" ]; then echo "training.run.seed=$SEED"
  elif [ -n "$SEEDS" ] && [ "$SEEDS" != 2 ]; then echo "training.run.seed=$(seq -s, 1 "$SEEDS")"; fi
}

case_threshold() {  # the gate's own threshold for this algorithm and task (unilab.bench.gate.CASES), 10 % for others
  "$PYTHON" -c 'import sys; from unilab.bench.gate import CASES
print(next((f"{c.threshold_pct:g}" for c in CASES if (c.algo, c.task) == tuple(sys.argv[1:3])), "10"))' "$1" "$2"
}

cmd_gate() {
  need ALGO TASK ENVS
  local name=${NAME:-${ALGO}_${TASK}} dir seeds
  dir=/tmp/gate/$name
  seeds=$(seed_overrides)
  local args=(-m +execution=$ARMS +bench=offpolicy_gate --algo "$ALGO" --task "$TASK" training.run.device=cuda:0
              task.num_envs="$ENVS" training.run.log_dir="$dir" $seeds "${OVERRIDES[@]}")
  log "gate $name: arms $ARMS, GPU $GPU"
  [[ ,$ARMS, == *,mps,* ]] && require_daemon "$GPU"
  note_dir "$dir"
  (if [[ ,$ARMS, == *,mps,* ]]; then use_daemon "$GPU"; else use_gpu "$GPU"; fi
   job "$S/gate_$name.log" -- "${TRAIN_CMD[@]}" "${args[@]}")
  if [[ $ARMS == *,* ]]; then
    [ -n "$THRESHOLD" ] || THRESHOLD=$(case_threshold "$ALGO" "$TASK")
    run_log "$S/gate_$name.txt" "${UNILAB_CMD[@]}" bench compare "$dir" --threshold-pct "$THRESHOLD" --plot "$S/gate_$name.png"
    run_log "$S/gate_$name.json" "${UNILAB_CMD[@]}" bench compare "$dir" --threshold-pct "$THRESHOLD" --json
    [ "$DRY" = 1 ] || cat "$S/gate_$name.txt"
    # one seed's two arms: only the mode may differ (run names and log paths are per run anyway)
    if [ "$DRY" = 1 ]; then
      echo "$(q "${UNILAB_CMD[@]}" config diff) RUN_DEFAULT RUN_MPS > $(q "$S/gate_${name}_diff.txt") 2>&1  # one seed's two runs in $dir"
    else
      local pair; pair=$("$PYTHON" - "$dir" <<'PY'
import pathlib, sys
from unilab.rundir.run_config import load_run_config
runs = {}
for cfg in sorted(pathlib.Path(sys.argv[1]).glob("*/run_config.json")):
    t = load_run_config(cfg)["training"]
    runs.setdefault(t["run"]["seed"], {})[t["mps"]["cuda_process_sharing"] or "default"] = str(cfg.parent)
both = [arms for _, arms in sorted(runs.items()) if len(arms) == 2]
print(" ".join(sorted(both[0].values(), key=lambda d: d != both[0].get("default"))) if both else "")
PY
)
      if [ -n "$pair" ]; then
        run_log "$S/gate_${name}_diff.txt" "${UNILAB_CMD[@]}" config diff $pair; cat "$S/gate_${name}_diff.txt"
      else
        echo "no seed with both arms in $dir: no config diff"
      fi
    fi
  else
    extract_runs "$dir" "$name"
  fi
}

extract_runs() {  # DIR NAME: `unilab bench extract` of every run in DIR
  if [ "$DRY" = 1 ]; then echo "$(q "${UNILAB_CMD[@]}" bench extract) RUN  # each run in $1"; return; fi
  local d
  for d in "$1"/*/; do
    d=${d%/}
    [ -f "$d/run_config.json" ] || continue
    "$PYTHON" -c "import sys; from unilab.rundir.run_config import load_run_config; t = load_run_config(sys.argv[1])['training']; print(sys.argv[2], 'seed', t['run']['seed'], 'threads', t['mps']['mps_active_thread_percentage'], 'priority', t['mps']['mps_client_priority'])" "$d/run_config.json" "$(basename "$d")"
    "${UNILAB_CMD[@]}" bench extract "$d" > "$S/${2}_$(basename "$d").txt" 2>&1
    grep -E "iteration_ms|env_steps_per_s|learner_train_ms|collector_env_step_ms" "$S/${2}_$(basename "$d").txt"
  done
  return 0
}

cmd_matrix() {  # `unilab bench gate` under GPU G's daemon (device 0 = GPU G); its table goes to the log
  local out=$S/matrix${NAME:+_$NAME} args
  args=(bench gate --device cuda:0 --out "$out" ${CASES:+--cases "$CASES"})
  [ ${#OVERRIDES[@]} -gt 0 ] && args+=(-- "${OVERRIDES[@]}")
  log "the gate matrix under GPU $GPU's daemon, into $out"
  require_daemon "$GPU"
  note_dir "$out"
  (use_daemon "$GPU"; run_log "$S/matrix${NAME:+_$NAME}.log" "${UNILAB_CMD[@]}" "${args[@]}")
  [ "$DRY" = 1 ] || tail -25 "$S/matrix${NAME:+_$NAME}.log"
}

cmd_ab() {  # plain runs, default vs MPS, both under one raw daemon (training.mps.block_ambient_mps keeps the default arm off it)
  need ALGO TASK ENVS
  local name=${NAME:-${ALGO}_${TASK}_${ENVS}} mode device
  if [ -n "$DEVICES" ]; then device="training.run.devices=[$DEVICES]"; else device=training.run.device=cuda:0; fi
  note_dir /tmp/"$name"
  (if [ -n "$DEVICES" ]; then :; else use_gpu "$GPU"; fi
   RAW=1 cmd_mps_start
   for mode in default mps; do
     log "ab $name: $mode"
     job "$S/${name}_$mode.log" --timeout 600 --env CUDA_MPS_PIPE_DIRECTORY=$RAW_PIPE \
       --env CUDA_MPS_LOG_DIRECTORY=$RAW_LOG -- "${TRAIN_CMD[@]}" --algo "$ALGO" --task "$TASK" "$device" task.num_envs="$ENVS" \
       algo.max_iterations="$ITERS" algo.save_interval=100000 training.run.log_dir=/tmp/"$name" training.run.run_name="${name}_$mode" \
       training.mps.block_ambient_mps=true +execution=$mode "${OVERRIDES[@]}"
     [ "$DRY" = 1 ] || tail -2 "$S/${name}_$mode.log"
   done
   RAW=1 cmd_mps_stop)
  extract_runs /tmp/"$name" "$name"
}

passthrough() {  # --gpu G, --tag X, --timeout S, --dry-run are the script's; everything else goes to the tool
  PASS=() TIMEOUT=$1 TAG=""; shift
  while [ $# -gt 0 ]; do
    case $1 in
      --gpu) GPU=$2; shift ;;
      --tag) TAG=$2; shift ;;
      --timeout) TIMEOUT=$2; shift ;;
      --dry-run) DRY=1 ;;
      *) PASS+=("$1") ;;
    esac
    shift
  done
}
arg_of() {  # OPTION DEFAULT: the value of OPTION in PASS
  local i
  for ((i = 0; i < ${#PASS[@]}; i++)); do [ "${PASS[$i]}" = "$1" ] && { echo "${PASS[$((i + 1))]:-}"; return; }; done
  echo "$2"
}

cmd_env() {
  passthrough 300 "$@"
  local json=()
  if [ -z "$(arg_of --json "")" ]; then
    if [[ " ${PASS[*]} " == *" --no-task-graph "* ]]; then json=(--json "$S/env${TAG:+_$TAG}_eager.json")
    else json=(--json "$S/env${TAG:+_$TAG}.json"); fi
  fi
  log "env throughput, GPU $GPU, no MPS"
  (use_gpu "$GPU"; run timeout "$TIMEOUT" "$PYTHON" benchmarks/env_throughput.py "${PASS[@]}" "${json[@]}")
}

cmd_alone() {
  passthrough 300 "$@"
  local json=() tag
  tag="$(arg_of --algo fastsac)_$(arg_of --task g1_walk_flat)_$(arg_of --envs 2048)${TAG:+_$TAG}"
  [ -n "$(arg_of --json "")" ] || json=(--json "$S/roles_$tag.json")
  log "roles alone $tag, GPU $GPU, no MPS"
  (use_gpu "$GPU"; run timeout "$TIMEOUT" "$PYTHON" benchmarks/roles_alone.py "${PASS[@]}" "${json[@]}")
}

cmd_side_by_side() {  # needs DIR/roles_ALGO_TASK_ENVS.json (`alone`) and GPU G's daemon (`mps-start`)
  need ALGO TASK ENVS
  local tag=${ALGO}_${TASK}_${ENVS} d=/tmp/side_${ALGO}_${TASK}_${ENVS} r
  log "side by side $tag: both roles as clients of GPU $GPU's daemon"
  require_daemon "$GPU"
  note_dir "$d"
  run rm -rf "$d"; run mkdir -p "$d"
  (use_daemon "$GPU"
   for r in learner collector; do
     if [ "$DRY" = 1 ]; then
       echo "$(q timeout 600 "$PYTHON" benchmarks/roles_alone.py --algo "$ALGO" --task "$TASK" --envs "$ENVS" --role $r \
         --side-by-side "$d" --seconds "${SECONDS_:-20}") > $(q "$S/side_${tag}_$r.log") 2>&1 &"
     else
       timeout 600 "$PYTHON" benchmarks/roles_alone.py --algo "$ALGO" --task "$TASK" --envs "$ENVS" --role $r \
         --side-by-side "$d" --seconds "${SECONDS_:-20}" > "$S/side_${tag}_$r.log" 2>&1 &
     fi
   done
   if [ "$DRY" = 1 ]; then echo "wait"; exit 0; fi
   # while they run: both must be clients of the server, or the numbers are time-slicing's
   while [ ! -f "$d/learner.ready" ] || [ ! -f "$d/collector.ready" ]; do sleep 2; done; sleep 5
   for srv in $(echo get_server_list | nvidia-cuda-mps-control); do
     echo "server $srv clients: $(echo "get_client_list $srv" | nvidia-cuda-mps-control | tr '\n' ' ')"; done
   wait)
  [ "$DRY" = 1 ] || { tail -1 "$S/side_${tag}_learner.log"; tail -1 "$S/side_${tag}_collector.log"; }
  run "$PYTHON" benchmarks/roles_alone.py --bound "$d" --alone "$S/roles_$tag.json"
}

default_keys() {
  case $1 in
    g1_walk_flat) echo "episode_length episode_return rew/track_lin_vel_xy rew/track_ang_vel_z" ;;
    g1_motion_tracking) echo "episode_length episode_return metrics/body_pos_error metrics/anchor_pos_error" ;;
    *) echo "episode_length episode_return" ;;
  esac
}

cmd_learn() {
  if [ -n "$WAIT" ]; then cmd_wait "$WAIT"; return; fi
  need ALGO TASK ENVS NAME SECONDS_
  [ "$EXECUTION" = mps ] && [ "$FOREGROUND" = 0 ] && require_daemon "$GPU"
  if [ "$FOREGROUND" = 0 ]; then  # detach: the device command may end, the run goes on
    local again=(bash "$ME" --out "$S" learn --foreground --algo "$ALGO" --task "$TASK" --envs "$ENVS" --name "$NAME"
                 --seconds "$SECONDS_" --segments "$SEGMENTS" --execution "$EXECUTION" --gpu "$GPU")
    [ -n "$KEYS" ] && again+=(--keys "$KEYS")
    detach "learn_$NAME" "${again[@]}" -- "${OVERRIDES[@]}"
    [ "$DRY" = 1 ] || return 0
  fi
  local dir=$LEARN_DIR k
  local args=(--algo "$ALGO" --task "$TASK" training.run.device=cuda:0 task.num_envs="$ENVS" algo.max_iterations=10000000
              algo.save_interval=1000 training.run.log_dir=$dir +execution="$EXECUTION" "${OVERRIDES[@]}")
  note_dir "$dir/$NAME"
  log "learning run $NAME: $ALGO $TASK, $ENVS envs, $EXECUTION, GPU $GPU, $SEGMENTS x $SECONDS_ s"
  (if [ "$EXECUTION" = mps ]; then use_daemon "$GPU"; else use_gpu "$GPU"; fi
   for ((k = 1; k <= SEGMENTS; k++)); do
     if [ "$k" = 1 ]; then last=training.run.run_name=$NAME; else last=training.run.resume=$dir/$NAME; fi
     job "$S/learn_${NAME}_$k.log" --timeout "$SECONDS_" -- "${TRAIN_CMD[@]}" "${args[@]}" "$last"
   done)
  run "${UNILAB_CMD[@]}" plot "$dir/$NAME" --out "$S/learn_$NAME.png" --metric ${KEYS:-$(default_keys "$TASK")}
}

cmd_soak() {
  need ALGO TASK ENVS SECONDS_
  local name=${NAME:-soak_${ALGO}_${TASK}_${ENVS}} dir=/tmp/soak
  local args=(--algo "$ALGO" --task "$TASK" training.run.device=cuda:0 task.num_envs="$ENVS" algo.max_iterations=10000000
              training.run.log_dir=$dir training.run.run_name="$name" +execution="$EXECUTION" "${OVERRIDES[@]}")
  [ "$EXECUTION" = mps ] && require_daemon "$GPU"
  note_dir "$dir/$name"
  log "soak $name: $ALGO $TASK, $ENVS envs, $EXECUTION, GPU $GPU, $SECONDS_ s, a sample every $INTERVAL s"
  run rm -rf "$dir/$name"
  (if [ "$EXECUTION" = mps ]; then use_daemon "$GPU"; else use_gpu "$GPU"; fi
   run "$PYTHON" benchmarks/soak_sample.py "$dir/$name" --out "$S/$name.jsonl" --interval "$INTERVAL" \
     --run-for "$SECONDS_" --log "$S/$name.log" -- "${TRAIN_CMD[@]}" "${args[@]}")
  [ "$DRY" = 1 ] || tail -3 "$S/$name.log"
  run "$PYTHON" benchmarks/soak_sample.py --report "$S/$name.jsonl" --warmup "$WARMUP"
}

SPEC_LINES=()
read_spec() {  # SPEC -> SPEC_LINES (comments and blank lines dropped, $CLIPS, $LIFTED and $SPLIT expanded); a bad spec exits 2
  local spec=$1 line name secs
  [ -f "$spec" ] || die "batch SPEC: no spec file '$spec'"
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%%#*}; [ -z "${line//[[:space:]]/}" ] && continue
    read -r name secs _ <<< "$line"
    [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad run name '$name' in $spec"
    [[ $secs =~ ^[0-9]+$ ]] || die "run $name in $spec: SECONDS must be a whole number, got '$secs'"
    line=${line//\$CLIPS/$CLIPS}; line=${line//\$LIFTED/$LIFTED}
    SPEC_LINES+=("${line//\$SPLIT/$SPLIT}")
  done < "$spec"
  [ ${#SPEC_LINES[@]} -gt 0 ] || die "$spec names no run"
}

cmd_batch() {  # every line of the spec (read_spec) a detached `learn`, side by side under GPU G's daemon
  need ALGO TASK ENVS
  require_daemon "$GPU"
  local common=("${OVERRIDES[@]}") line own first own_keys key
  if [ "$WARM_FIRST" = 1 ]; then  # one compile into the kernel cache, not one per run at once
    read -r _ _ own <<< "${SPEC_LINES[0]}"
    read -r -a first <<< "$own"
    first=("${common[@]}" "${first[@]}")
    # warmup refuses the keys it sets itself (they change no kernel): ask it which they are
    own_keys=$("$PYTHON" -c 'from unilab.cli.warmup import OWN_KEYS; print(*OWN_KEYS)') \
      || { echo "gpu_session.sh: unilab is not importable (PYTHONPATH?)" >&2; exit 1; }
    for k in "${!first[@]}"; do
      key=${first[$k]#[+~]}; key=${key#+}; key=${key%%=*}
      [[ " $own_keys " == *" $key "* ]] && unset "first[$k]"
    done
    log "warming the kernel cache with the first run's overrides"
    (if [ "$EXECUTION" = mps ]; then use_daemon "$GPU"; else use_gpu "$GPU"; fi
     run "${UNILAB_CMD[@]}" warmup --algo "$ALGO" --task "$TASK" training.run.device=cuda:0 task.num_envs="$ENVS" \
       +execution="$EXECUTION" "${first[@]}") \
      || { echo "gpu_session.sh: the warmup failed (its console is above); no run was started" >&2; exit 1; }
  fi
  for line in "${SPEC_LINES[@]}"; do
    read -r NAME SECONDS_ own <<< "$line"
    read -r -a OVERRIDES <<< "$own"
    OVERRIDES=("${common[@]}" "${OVERRIDES[@]}")
    cmd_learn
  done
}

cmd_evals() {  # [--gpu G] [--envs-per-clip K] [NAME ...]: evaluate learning runs side by side, then summarise
  local names=() k=16 f n
  while [ $# -gt 0 ]; do
    case $1 in
      --gpu) GPU=$2; shift ;;
      --envs-per-clip) k=$2; shift ;;
      -*) die "evals: unknown option $1" ;;
      *) names+=("$1") ;;
    esac
    shift
  done
  if [ ${#names[@]} = 0 ]; then
    for f in "$S"/jobs/learn_*.pid; do [ -f "$f" ] && n=$(basename "${f%.pid}") && names+=("${n#learn_}"); done
  fi
  [ ${#names[@]} = 0 ] && [ "$DRY" = 1 ] && names=(NAME)  # a dry run started no job: show one
  [ ${#names[@]} -gt 0 ] || die "evals: no learning runs in $S/jobs (start them with learn or batch, or name them)"
  require_daemon "$GPU"
  log "evals: ${names[*]} (under GPU $GPU's daemon, $k envs per clip)"
  (use_daemon "$GPU"
   for n in "${names[@]}"; do
     run_log "$S/eval_$n.log" "${UNILAB_CMD[@]}" eval "$LEARN_DIR/$n" --suite all --envs-per-clip "$k" --out "$S/eval_$n.json" &
   done
   wait)
  run "$PYTHON" benchmarks/batch_summary.py "$S" "$LEARN_DIR" "${names[@]}"
}

fault_run() {  # VICTIM (learner | server): a run under GPU G's daemon, kill -9 of VICTIM once metrics flow
  local victim=$1 name=faults_$1 dir=/tmp/faults
  local args=(--algo "$ALGO" --task "$TASK" training.run.device=cuda:0 task.num_envs="$ENVS" algo.max_iterations=10000000
              training.run.log_dir=$dir training.run.run_name="$name" +execution=mps "${OVERRIDES[@]}")
  note_dir "$dir/$name"
  log "faults: kill -9 of the $victim mid-run ($ALGO $TASK, $ENVS envs, GPU $GPU's daemon)"
  run rm -rf "$dir/$name"
  (use_daemon "$GPU"; run "$PYTHON" benchmarks/faults.py kill "$victim" --log-dir "$S" -- "${TRAIN_CMD[@]}" "${args[@]}")
}

neighbour_stop() {  # two runs side by side under GPU G's daemon; SIGINT to the first; the second must go on
  local dir=/tmp/faults a=faults_stop_a b=faults_stop_b
  local args=(--algo "$ALGO" --task "$TASK" training.run.device=cuda:0 task.num_envs="$ENVS" algo.max_iterations=10000000
              training.run.log_dir=$dir +execution=mps "${OVERRIDES[@]}")
  note_dir "$dir/$a"; note_dir "$dir/$b"
  log "faults: SIGINT to one of two runs side by side under GPU $GPU's daemon; the other must go on"
  run rm -rf "$dir/$a" "$dir/$b"
  (use_daemon "$GPU"; run "$PYTHON" benchmarks/faults.py neighbours "$a" "$b" --log-dir "$S" -- "${TRAIN_CMD[@]}" "${args[@]}")
}

cmd_faults() {
  need ALGO TASK ENVS
  require_daemon "$GPU"
  fault_run learner
  fault_run server
  log "the daemon after its server was killed (a new client starts a new server)"
  run "${UNILAB_CMD[@]}" mps status
  neighbour_stop
}

detach() {  # NAME CMD...: run CMD in its own session, immune to the end of this command; DIR/NAME.log, DIR/jobs/NAME.rc
  local name=$1; shift
  if [ "$DRY" = 1 ]; then echo "setsid nohup $(q "$@") > $(q "$S/$name.log") 2>&1 < /dev/null &  # detached; then: wait"; return; fi
  mkdir -p "$S/jobs"; rm -f "$S/jobs/$name.rc"
  setsid nohup bash -c '"$@"; echo $? > "$0"' "$S/jobs/$name.rc" "$@" > "$S/$name.log" 2>&1 < /dev/null &
  echo $! > "$S/jobs/$name.pid"
  log "$name detached (pid $!), log $S/$name.log"
}

cmd_wait() {  # follow the detached jobs for up to SECONDS
  local end=$(( $(date +%s) + ${1:-500} )) next=0 f name open
  [ "$DRY" = 1 ] && { echo "# follow $S/jobs/*.pid until each has its .rc, or ${1:-500} s pass"; return; }
  compgen -G "$S/jobs/*.pid" > /dev/null || { echo "no detached jobs in $S/jobs"; return; }
  while :; do
    open=0
    for f in "$S"/jobs/*.pid; do [ -f "$f" ] && [ ! -f "${f%.pid}.rc" ] && open=$((open + 1)); done
    [ "$open" = 0 ] || [ "$(date +%s)" -ge "$end" ] && break
    if [ "$(date +%s)" -ge "$next" ]; then
      log "$open job(s) running"
      for f in "$LEARN_DIR"/*/metrics.jsonl; do [ -f "$f" ] && echo "$f $(wc -l < "$f") rows: $(tail -1 "$f" | cut -c1-200)"; done
      next=$(( $(date +%s) + 60 ))
    fi
    sleep 10
  done
  for f in "$S"/jobs/*.pid; do
    [ -f "$f" ] || continue
    name=$(basename "${f%.pid}")
    log "$name: $([ -f "${f%.pid}.rc" ] && echo "ended, rc=$(cat "${f%.pid}.rc")" || echo "running, pid $(cat "$f")")"
    tail -15 "$S/$name.log" 2>/dev/null
  done
}

cmd_collect() {  # DIR and the run folders the subcommands noted in DIR/rundirs
  local dirs=("$S") d
  if [ -f "$S/rundirs" ]; then while read -r d; do [ -e "$d" ] && dirs+=("$d"); done < "$S/rundirs"; fi
  run mkdir -p "${OUT:-/tmp/out}"
  run tar -czf "${OUT:-/tmp/out}/session.tgz" --exclude='*.pt' --exclude=tensorboard "${dirs[@]}"
  [ "$DRY" = 1 ] || ls -la "${OUT:-/tmp/out}"
}

usage() { sed -n '2,/^set -u/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; }

SUB=${1:-}
[ $# -gt 0 ] && shift
if [ "$SUB" = batch ]; then  # the spec is checked before anything is created
  [ $# -gt 0 ] || die "batch SPEC --algo A --task T --envs N"
  read_spec "$1"; shift
fi
[ "$DRY" = 1 ] || mkdir -p "$S"
case $SUB in
  checks) parse "$@"; cmd_checks ;;
  mps-start) parse "$@"; cmd_mps_start ;;
  mps-stop) parse "$@"; cmd_mps_stop ;;
  mps-check) parse "$@"; cmd_mps_check ;;
  gate) parse "$@"; cmd_gate ;;
  matrix) parse "$@"; cmd_matrix ;;
  ab) parse "$@"; cmd_ab ;;
  env) cmd_env "$@" ;;
  alone) cmd_alone "$@" ;;
  side-by-side) parse "$@"; cmd_side_by_side ;;
  learn) parse "$@"; cmd_learn ;;
  batch) parse "$@"; cmd_batch ;;
  evals) cmd_evals "$@" ;;
  soak) parse "$@"; cmd_soak ;;
  faults) parse "$@"; cmd_faults ;;
  bg) [ $# -ge 2 ] || die "bg NAME SUBCOMMAND ..."; name=$1; shift
      detach "$name" bash "$ME" --out "$S" "$@"
      if [ "$DRY" = 1 ]; then exec bash "$ME" --dry-run --out "$S" "$@"; fi ;;
  wait) cmd_wait "${1:-500}" ;;
  collect) cmd_collect ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
