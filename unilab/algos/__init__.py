"""Off-policy learners that plug into the shared learner/collector runtime."""
