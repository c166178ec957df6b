"""GitOps: what a pull request changes (`diff`), moving a blueprint from one environment to the
next on validation evidence (`promote`: the evidence is `rackform.evidence`'s, the gate `up` checks
`rackform.stack.promotion`), and what differs between a blueprint and its live cluster
(`hostdrift`, `resdrift`)."""
