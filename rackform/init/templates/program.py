"""The Pulumi program: rackform builds the cluster that the stack's config names
(`rackform:blueprint`, `rackform:environment`). Nothing of rackform is copied here; upgrade it
in requirements.txt."""

from pathlib import Path

from rackform.stack.program import main

main(Path(__file__).resolve().parent)  # the Pulumi project: where Pulumi.yaml is
