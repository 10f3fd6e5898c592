"""The rank-local runtime: a collector process and a learner process joined by explicit queues
and shared CUDA buffers (Sample Factory style named roles)."""
