"""The one gate before `up` creates anything, with one result: `rackform up` runs it before it
calls Pulumi, and the Pulumi program runs it again in its own process (a bare `pulumi up`
reaches only the program), so both refuse the same things in the same words.

In order: the retired symmetric evidence key is refused; the signing key, where one is set,
must be readable (a broken key fails here, not after the cluster was validated and the report
could not be signed); and an environment that takes its blueprint by promotion needs the
verified record of it."""

from __future__ import annotations

from pathlib import Path

from rackform.evidence.signing import SigningError, legacy_key_problem, load_signing_key
from rackform.plan.model import Plan
from rackform.stack.promotion import Prepare, PromotionRequired, require_promotion

NOTHING_CREATED = "nothing was created"


class UpRefused(Exception):
    """`up` may not go ahead: one line, which says nothing was created."""


def before_up(plan: Plan, project: Path | None, prepare: Prepare) -> None:
    """Raise UpRefused where `up` of `plan` in the Pulumi project `project` may not start
    (`prepare`: the engine's, for the environment a promotion comes from)."""
    problem = legacy_key_problem()
    if problem:
        raise UpRefused(f"{problem}; {NOTHING_CREATED}")
    try:
        load_signing_key()
    except SigningError as exc:
        raise UpRefused(f"{exc}; {NOTHING_CREATED}") from None
    try:
        require_promotion(plan, project, prepare)
    except PromotionRequired as exc:
        raise UpRefused(f"{exc}; {NOTHING_CREATED}") from None
