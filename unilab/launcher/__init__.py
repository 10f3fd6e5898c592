"""Per-rank launcher: prepares the run, then starts the learner and collector processes."""
