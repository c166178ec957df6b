"""The `--evidence` and `--state-dir` options `plan` and `goodput` share, and the plan compiled
again with what the cluster measured of itself (its checkpoint's write speed in its saved
validation statement, its failure rate in heal's audit log), where there is any."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.common import user_error
from rackform.engine import Prepared, prepare
from rackform.lifecycle.directory import HELP

Evidence = Annotated[
    Path | None,
    typer.Option(
        "--evidence",
        help="The cluster's saved validation statement (`pulumi stack output evidence --json`): "
        "its checkpoint_write speed gives the checkpoint's blocking time.",
    ),
]
StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help=f"Where heal's audit log is, for the cluster's own failure rate ({HELP}).",
    ),
]


def with_measured(
    file: Path, env: str | None, p: Prepared, evidence: Path | None, state: Path | None
) -> Prepared:
    """`p` compiled again with the cluster's measurements; `p` itself where there are none.
    A statement that is not the cluster's is the user's mistake (exit 2)."""
    from rackform.evidence.statement import EvidenceError
    from rackform.goodput.measured import measured
    from rackform.lifecycle.directory import state_dir
    from rackform.lifecycle.record import Store
    from rackform.plan.compile import catalog_rate

    plan = p.plan
    try:
        m = measured(plan.stack, catalog_rate(plan), evidence, Store(state_dir(state), plan.stack))
    except EvidenceError as exc:
        raise user_error(str(exc)) from None
    return p if m.empty else prepare(file, env, measured=m)
