"""A soak test's sampler: the memory of every process of a training run, over hours, and whether it grows.

    python benchmarks/soak_sample.py RUN_DIR_OR_LAUNCHER_PID --out soak.jsonl [--interval 60] [--duration S]
    python benchmarks/soak_sample.py RUN_DIR --out soak.jsonl [--interval 60] --run-for S --log LOG -- TRAIN...
    python benchmarks/soak_sample.py --report soak.jsonl [--warmup auto|SECONDS] [--max-growth 2]

Sampling: every --interval seconds, the resident memory (RSS, /proc) of the launcher and each of its
descendants (learner, collector, play), and each one's GPU memory through NVML (nvidia-ml-py:
nvmlDeviceGetComputeRunningProcesses, and nvmlDeviceGetMPSComputeRunningProcesses for MPS clients);
where NVML lists no process (some MPS setups), the GPU's total used memory instead. Without NVML the
GPU columns are empty. It ends when the launcher has exited, or after --duration seconds.

With a `train` command after `--` (whose run directory is RUN_DIR), it starts the training itself, as a job of
unilab.jobs (its own process group, its console in --log; Ctrl-C here stops it), samples it from the moment its
launcher holds RUN_DIR's run.lock, and stops it with SIGINT --run-for seconds after the command (bounded: killed
if it has not ended two minutes later).

--report: per process and kind of memory, the value at the first sample after the warm-up, the last
value and the growth in %. The warm-up (--warmup auto, the default) ends one sample after the run's first
metrics row: by then the kernels and the losses are compiled and the replay is filled, however long that
took (minutes with cold caches and several runs compiling at once); --warmup SECONDS sets it instead. Also plus the run's ingress backpressure and NaN-guard counters (metrics.jsonl) and
its status (run_summary.json). Exit status 0 when no growth exceeds --max-growth %, 1 otherwise, 2 on
bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from unilab.jobs.runner import JobProcess, interrupts
from unilab.processes import descendants
from unilab.rundir.layout import LOCK_FILE, MANIFEST_FILE, METRICS_FILE, SUMMARY_FILE
from unilab.rundir.lock import holder_pid
from unilab.rundir.metrics import MetricsError, read_metrics

MIB = 1024 * 1024
FALLBACK_WARMUP_S = 120.0  # --warmup auto on samples that do not know the metrics file (a pid target)
COUNTERS = ("ingress_backpressure", "nan_guard_trips")  # metrics.jsonl keys, cumulative per run segment


class UsageError(ValueError):
    pass


# ---------------------------------------------------------------- the processes of a run


def resolve_target(target: str) -> tuple[int, Path | None]:
    """(launcher pid, run directory or None) from a run directory (its run.lock holds the launcher's pid) or a pid."""
    if target.isdigit():
        pid = int(target)
        if not os.path.exists(f"/proc/{pid}"):
            raise UsageError(f"no process {pid}")
        return pid, None
    run_dir = Path(target)
    if not (run_dir / MANIFEST_FILE).is_file() and not (run_dir / LOCK_FILE).is_file():
        raise UsageError(f"{target} is neither a pid nor a run directory of a running training")
    pid = holder_pid(run_dir / LOCK_FILE)
    if pid is None or not os.path.exists(f"/proc/{pid}"):
        raise UsageError(f"{run_dir}: no running launcher ({LOCK_FILE} names none that is alive)")
    return pid, run_dir


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def role_names(root: int, run_dir: Path | None) -> dict[int, str]:
    """pid -> learner / collector (the run's manifest, ranks suffixed), launcher; others by their command."""
    names = {root: "launcher"}
    try:
        manifest = json.loads((run_dir / MANIFEST_FILE).read_text()) if run_dir else {}
    except (OSError, ValueError):
        manifest = {}
    for rank in manifest.get("ranks") or []:
        suffix = "" if rank.get("rank", 0) == 0 else f"[{rank['rank']}]"
        for role in ("learner", "collector"):
            if rank.get(f"{role}_pid"):
                names[int(rank[f"{role}_pid"])] = role + suffix
    return names


def _name(pid: int, roles: dict[int, str]) -> str:
    if pid in roles:
        return roles[pid]
    try:
        return f"{Path(f'/proc/{pid}/comm').read_text().strip()}:{pid}"
    except OSError:
        return str(pid)


# ---------------------------------------------------------------- GPU memory


def load_nvml():
    """pynvml, initialised; None without the library or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001  (ImportError or any NVMLError: the GPU columns stay empty)
        return None


def gpu_memory(nvml) -> tuple[dict[int, float], float | None]:
    """(MiB per pid as NVML lists them, compute and MPS clients; total used MiB over every GPU)."""
    if nvml is None:
        return {}, None
    per_pid: dict[int, float] = {}
    total = 0.0
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        total += nvml.nvmlDeviceGetMemoryInfo(handle).used / MIB
        for lister in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses"):
            try:
                processes = getattr(nvml, lister)(handle)
            except Exception:  # noqa: BLE001  (not supported by this driver or GPU)
                continue
            for p in processes:
                if p.usedGpuMemory is not None:
                    per_pid[p.pid] = per_pid.get(p.pid, 0.0) + p.usedGpuMemory / MIB
    return per_pid, total


def sample(root: int, run_dir: Path | None, nvml, started: float) -> dict:
    roles = role_names(root, run_dir)
    per_pid, total = gpu_memory(nvml)
    procs = {}
    for pid in descendants(root):
        rss = rss_mib(pid)
        if rss is not None:
            procs[_name(pid, roles)] = {"pid": pid, "rss_mib": round(rss, 1),
                                        "gpu_mib": round(per_pid[pid], 1) if pid in per_pid else None}
    return {"t": round(time.monotonic() - started, 1), "time": round(time.time(), 1), "procs": procs,
            "gpu_total_used_mib": None if total is None else round(total, 1),
            "metrics_bytes": _metrics_bytes(run_dir)}


def _metrics_bytes(run_dir: Path | None) -> int | None:
    """Size of the run's metrics.jsonl (0 until the first row): what --warmup auto reads."""
    if run_dir is None:
        return None
    try:
        return (run_dir / METRICS_FILE).stat().st_size
    except OSError:
        return 0


def run_sampler(target: str, out: Path, interval: float, duration: float | None, nvml=None) -> int:
    root, run_dir = resolve_target(target)
    started = time.monotonic()
    with open(out, "a", buffering=1) as f:
        f.write(json.dumps({"header": {"launcher_pid": root, "run_dir": str(run_dir) if run_dir else None,
                                       "interval_s": interval}}) + "\n")
        while os.path.exists(f"/proc/{root}") and (duration is None or time.monotonic() - started <= duration):
            row = sample(root, run_dir, nvml, started)
            if not any(p["pid"] == root for p in row["procs"].values()):
                break  # the launcher has exited (a zombie not yet reaped has no RSS): what is left is not the run
            f.write(json.dumps(row) + "\n")
            time.sleep(max(0.0, interval - (time.monotonic() - started) % interval))
    return 0


def run_and_sample(cmd: list[str], target: str, out: Path, interval: float, run_for: float | None, log: Path,
                   nvml=None) -> int:
    """The training `cmd` started, sampled from the moment its launcher holds run.lock, stopped after `run_for` s."""
    started = time.monotonic()
    with interrupts(), JobProcess(cmd, log=log) as job:
        while True:
            if job.poll() is not None:
                print(f"soak_sample: the run ended (exit {job.returncode}) before its launcher held {target}/"
                      f"{LOCK_FILE}; its console: {log}", file=sys.stderr)
                return 1
            try:
                resolve_target(target)
                break
            except UsageError:
                time.sleep(1)
        sampler = threading.Thread(target=run_sampler, args=(target, out, interval, None, nvml), daemon=True)
        sampler.start()
        while job.poll() is None and (run_for is None or time.monotonic() - started < run_for):
            time.sleep(0.5)
        job.stop(signal.SIGINT)
        sampler.join()
    return 0


# ---------------------------------------------------------------- the report


def read_samples(path: Path) -> tuple[dict, list[dict]]:
    header, rows = {}, []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise UsageError(f"{path}:{n}: not a JSON line") from None
        if "header" in row:
            header = row["header"]
        elif "procs" in row:
            rows.append(row)
    return header, rows


def series(rows: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """'<process> rss' / '<process> gpu' / 'GPU total used' -> (t, MiB) points."""
    out: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        for name, p in row["procs"].items():
            for kind in ("rss", "gpu"):
                if p.get(f"{kind}_mib") is not None:
                    out.setdefault(f"{name} {kind}", []).append((row["t"], p[f"{kind}_mib"]))
        if row.get("gpu_total_used_mib") is not None:
            out.setdefault("GPU total used", []).append((row["t"], row["gpu_total_used_mib"]))
    return out


def growth_table(rows: list[dict], warmup: float) -> list[dict]:
    table = []
    for name, points in series(rows).items():
        after = [(t, v) for t, v in points if t >= warmup]
        if not after:
            continue
        warm, last = after[0][1], after[-1][1]
        growth = 100.0 * (last - warm) / warm if warm else 0.0
        table.append({"series": name, "after_warmup_mib": warm, "last_mib": last, "growth_pct": round(growth, 2),
                      "samples": len(after)})
    return table


def run_counters(run_dir: Path | None) -> dict:
    if run_dir is None:
        return {}
    out: dict = {}
    try:
        rows = read_metrics(run_dir, latest_per_iteration=True, torn_tail_ok=True)
    except (MetricsError, OSError):
        rows = []
    for key in COUNTERS:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        if values:
            out[key] = max(values)
    try:
        s = json.loads((run_dir / SUMMARY_FILE).read_text())
        out["status"] = s.get("status") + (f" ({s['cause']})" if s.get("cause") else "")
    except (OSError, ValueError, TypeError):
        pass
    return out


def auto_warmup(rows: list[dict]) -> tuple[float, str]:
    """(seconds, how they were found): one sample after the first that saw metrics rows."""
    sizes = [r.get("metrics_bytes") for r in rows]
    if all(size is None for size in sizes):
        return FALLBACK_WARMUP_S, f"{FALLBACK_WARMUP_S:g} s (the samples do not know the run's metrics)"
    first = next((i for i, size in enumerate(sizes) if size), None)
    if first is None:
        raise UsageError("the run wrote no metrics row while it was sampled: give --warmup SECONDS")
    if first + 1 >= len(rows):
        raise UsageError(f"no sample after the warm-up (metrics began at {rows[first]['t']:g} s, the last sample)")
    return rows[first + 1]["t"], f"{rows[first + 1]['t']:g} s (one sample after the first metrics row)"


def report(path: Path, warmup: float | None, max_growth: float) -> int:
    """warmup: seconds, or None for auto."""
    header, rows = read_samples(path)
    if not rows:
        raise UsageError(f"{path}: no samples")
    if warmup is None:
        warmup, how = auto_warmup(rows)
    else:
        how = f"{warmup:g} s"
    print(f"warm-up: {how}")
    table = growth_table(rows, warmup)
    if not table:
        raise UsageError(f"{path}: no sample after the warm-up ({warmup:g} s; the last is at {rows[-1]['t']:g} s)")
    width = max(len(r["series"]) for r in table)
    print(f"{'series':{width}}  after warm-up MiB   last MiB   growth %")
    failed = []
    for r in table:
        bad = r["growth_pct"] > max_growth
        failed += [r["series"]] if bad else []
        print(f"{r['series']:{width}}  {r['after_warmup_mib']:15.1f}  {r['last_mib']:9.1f}  {r['growth_pct']:9.2f}"
              f"{'  > ' + format(max_growth, 'g') + ' %' if bad else ''}")
    run_dir = Path(header["run_dir"]) if header.get("run_dir") else None
    for key, value in run_counters(run_dir).items():
        print(f"{key}: {value}")
    span = rows[-1]["t"] - warmup
    verdict = "FAIL" if failed else "PASS"
    print(f"{verdict}: {len(failed)} of {len(table)} series grew more than {max_growth:g} % over {span:.0f} s "
          f"after the warm-up" + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


def _warmup(text: str) -> float | None:
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: auto or a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: auto or a finite number of seconds >= 0")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="?", help="a run directory of a running training, or its launcher's pid")
    parser.add_argument("--out", type=Path, help="the JSONL file the samples are appended to")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--duration", type=float, help="stop sampling after this many seconds")
    parser.add_argument("--report", type=Path, metavar="SAMPLES", help="report on a samples file instead")
    parser.add_argument("--warmup", type=_warmup, default=None, metavar="auto|SECONDS",
                        help="the start excluded from the growth: auto (default) ends it one sample after the run's "
                             "first metrics row; or seconds")
    parser.add_argument("--max-growth", type=float, default=2.0, help="the growth in %% that fails the soak")
    parser.add_argument("--run-for", type=float, metavar="SECONDS",
                        help="with a train command: SIGINT to it this many seconds after it started")
    parser.add_argument("--log", type=Path, help="with a train command: where its console goes")
    argv = sys.argv[1:] if argv is None else argv
    train = argv[argv.index("--") + 1:] if "--" in argv else []  # a train command that makes the run RUN_DIR
    args = parser.parse_args(argv[:len(argv) - len(train) - 1] if "--" in argv else argv)
    try:
        if args.report is not None:
            if not args.report.is_file():
                raise UsageError(f"{args.report}: no such file")
            return report(args.report, args.warmup, args.max_growth)
        if not args.target or args.out is None:
            raise UsageError("give a run directory or launcher pid and --out FILE (or --report FILE)")
        if args.interval <= 0:
            raise UsageError("--interval must be positive")
        if train:
            if args.log is None or (args.run_for is not None and args.run_for <= 0):
                raise UsageError("a train command needs --log FILE, and --run-for, if given, positive seconds")
            return run_and_sample(train, args.target, args.out, args.interval, args.run_for, args.log, load_nvml())
        if args.run_for is not None or args.log is not None:
            raise UsageError("--run-for and --log go with a train command (after --)")
        root, _ = resolve_target(args.target)  # checked before the file is created
        return run_sampler(args.target, args.out, args.interval, args.duration, load_nvml())
    except UsageError as exc:
        print(f"soak_sample: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
