"""What a validation run proves, and the rule that says so: below the stack that runs the
Validate stage and the GitOps code that promotes on its evidence, so both read one verdict
(`verdict`), one pin (`pin`, `shipped`), one statement (`statement`), one signature (`signing`)
and one list of trusted keys (`trust`)."""
