"""The exit statuses of every unilab command and process, one meaning each: `train`, `unilab ...`, the sweep, the
gate and the job runners that read a status back all use these."""

EXIT_COMPLETED = 0  # did what was asked (a gate: passed)
EXIT_FAILED = 1  # ran and failed: a crashed child, a failed job, a gate not met
EXIT_USAGE = 2  # refused before anything was created: bad input, an unmet prerequisite (with its fix)
EXIT_INTERRUPTED = 130  # stopped on request (Ctrl-C, SIGTERM): 128 + SIGINT, as a shell reports it

STATUS = {EXIT_COMPLETED: "completed", EXIT_FAILED: "failed", EXIT_USAGE: "refused", EXIT_INTERRUPTED: "interrupted"}
