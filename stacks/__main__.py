"""The Pulumi program: everything lives in `rackform.stack.program` (see there)."""

from pathlib import Path

from rackform.stack.program import main

main(Path(__file__).resolve().parent.parent)  # the Pulumi project: where Pulumi.yaml is
