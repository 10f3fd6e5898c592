"""Jobs: `train` commands run as child processes.

- runner: one job in a session of its own, its console (inherited, a log file, or line by line), SIGINT or
  SIGTERM passed on to its process group, its bounded end, and the status its run_summary.json records.

Nothing here imports torch, warp or MuJoCo, nor the command-line layer (unilab.cli) above it.
"""
