"""The node lifecycle: what reap, heal and rolling changes share when they take nodes or clusters
out of service and back: the lock, the state directory, the audit log, node states, the
out-of-service budget and the breaker, the Slurm steps and the remedies."""
