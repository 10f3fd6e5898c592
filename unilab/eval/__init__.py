"""`unilab eval RUN`: the quality of a run's policy, measured by deterministic rollouts (eval.json)."""
