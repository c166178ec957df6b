"""Acceptance: what the stack's Validate stage runs to accept a cluster as the blueprint says it
is (the run over every node, the validators' command lines, the per-node outliers).

One word per meaning of "validate": `rackform validate` checks a blueprint (schema and
preflight, nothing touched); the blueprint's `validation:` section holds the thresholds and the
smoke job's settings; the Validate stage accepts the cluster through this package; and the
top-level `validators/` are the checks that run on the nodes themselves."""
