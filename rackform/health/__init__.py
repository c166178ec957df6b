"""`rackform heal`: each node's health from its telemetry (healthy, suspect, failed, unknown),
with its evidence and the action the blueprint's health policy gives, within the cluster's
out-of-service budget and behind a breaker for fleet-wide signals."""
