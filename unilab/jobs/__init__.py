"""Jobs: `train` commands run as child processes, and the packed sweep that runs several at once.

- runner: one job in a session of its own, its console (inherited, a log file, or line by line), SIGINT or
  SIGTERM passed on to its process group, its bounded end, and the status its run_summary.json records. The
  gate (unilab.bench.gate_run), the packed sweep and the benchmark tools (benchmarks/) start every job here.
- packed: `hydra/launcher=unilab_packed`'s scheduler: up to max_parallel jobs of a sweep at once.
- memory_guard: the packed sweep's GPU memory guard (NVML only: no CUDA context here).

Nothing here imports torch, warp or MuJoCo, nor the command-line layer (unilab.cli) above it.
"""
