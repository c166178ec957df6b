"""`rackform reap`: idle verdicts from DCGM utilization in Prometheus, and the idle policy's
action per target, dry run by default, every decision in an audit log."""
