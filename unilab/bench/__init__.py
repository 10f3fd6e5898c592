"""Benchmark tooling: `unilab bench extract` (one run) and `unilab bench compare` (the MPS A/B gate)."""
