"""Promotion: a blueprint reaches an environment declared with `promotion: {ENV: {from: SRC}}`
only through a promotion record, and the record is verified where the cluster is applied.

The rule. The evidence is SRC's own Validate-stage statement, from SRC's stack outputs, signed
by a key `promotion-keys.yaml` lists for SRC, passing on every node, for SRC's digest at the
commit being promoted. The record carries that signed envelope and pins ENV's digest. ENV may
differ from the validated SRC only by its own override block (`environments.ENV`): a change to
anything else (the base, or SRC's override) changes SRC's digest, so it needs new evidence; a
change to ENV's override changes ENV's digest, so it needs a new promotion. What reaches the
nodes besides the blueprint (rackform's version, the roles and validators, the promotion rules,
the images: the evidence's `pin`) must be what SRC validated.

`rackform up` and the Pulumi program (`pulumi up`) on ENV verify all of it themselves
(`require_promotion`): a record's existence proves nothing, and a hand-written or edited record
is refused with the reason. The record is a reviewable file, `promotions/<cluster>-<env>.json`
at the top of the git repository that holds the blueprint (else beside the Pulumi project);
`rackform promote --commit` commits it.

The gate is the stack's, beside the program that checks it: verifying a record compiles the
source environment with the `prepare` its caller hands over (the engine's), and checks the
statement, the pin and the keys; `rackform promote` writes the records.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rackform.blueprint.problems import BlueprintError
from rackform.evidence import trust
from rackform.evidence.pin import differences, pin_of
from rackform.evidence.signing import SigningError, legacy_key_problem
from rackform.evidence.statement import EvidenceError, Proven, check
from rackform.plan.model import Plan
from rackform.preflight.prepared import Prepared

RECORDS = "promotions"
FORMAT = "rackform-promotion/2"


class PromotionRequired(Exception):
    """The environment takes the blueprint only by promotion and no matching record exists."""


@dataclass(frozen=True)
class Rule:
    target: str
    source: str


def rule_for(plan: Plan) -> Rule | None:
    """The promotion rule of `plan`'s environment (the base blueprint's, validated with it)."""
    return None if plan.promoted_from is None else Rule(plan.environment, plan.promoted_from)


def records_root(blueprint: Path, project: Path | None) -> Path:
    """Where records live: the top of the git repository that holds the blueprint (the one a
    pipeline commits to), else the Pulumi project, else the blueprint's directory."""
    for d in blueprint.resolve().parents:
        if (d / ".git").exists():
            return d
    return project or blueprint.resolve().parent


def record_path(root: Path, cluster: str, env: str) -> Path:
    return root / RECORDS / f"{cluster}-{env}.json"


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise PromotionRequired(f"{path}: not a promotion record (unreadable JSON)") from None
    return doc if isinstance(doc, dict) else None


# The engine's `prepare`: a blueprint file's environment, compiled and checked.
Prepare = Callable[[Path, str], Prepared]


def require_promotion(plan: Plan, project: Path | None, prepare: Prepare) -> None:
    """Raise PromotionRequired unless `plan`'s environment needs no promotion, or a record
    promotes exactly this digest into it on evidence verified here (`verify_record`). What
    `up` and the program call; the message is one line, the record's path first."""
    try:
        rule = rule_for(plan)
    except BlueprintError as exc:
        raise PromotionRequired("; ".join(map(str, exc.problems))) from None
    if rule is None:
        return
    path = record_path(records_root(plan.effective.path, project), plan.name, plan.environment)
    record = read_record(path)
    how = (
        f"run `rackform promote {plan.source} --from {rule.source} --to {rule.target}` after "
        f"`rackform up --env {rule.source}` validated it"
    )
    if record is None:
        raise PromotionRequired(
            f"{plan.source}: environment {rule.target} takes this blueprint only by promotion "
            f"from {rule.source}, and {path} does not exist: {how}"
        )
    if record.get("from") != rule.source or record.get("to") != rule.target:
        raise PromotionRequired(
            f"{path}: promotes {record.get('from')} -> {record.get('to')}, but the blueprint "
            f"declares {rule.source} -> {rule.target}: {how}"
        )
    if record.get("target_digest") != plan.digest:
        raise PromotionRequired(
            f"{path}: promoted digest {record.get('target_digest')}, but {rule.target}'s digest "
            f"is now {plan.digest} (the blueprint changed since): {how}"
        )
    try:
        verify_record(record, plan, rule, project, prepare)
    except (EvidenceError, SigningError) as exc:
        raise PromotionRequired(f"{path}: refused: {exc}") from None
    except BlueprintError as exc:
        raise PromotionRequired("; ".join(map(str, exc.problems))) from None


def verify_record(
    record: dict[str, Any],
    plan: Plan,
    rule: Rule,
    project: Path | None,
    prepare: Prepare,
    now: datetime | None = None,
) -> Proven:
    """The record's own evidence proves the promotion into `plan`'s environment now: a format
    rackform writes, a signature by a key trusted for the source, the source's digest now, the
    digest chain (statement subject = record's subject), and the same bits as validated."""
    if record.get("format") != FORMAT:
        raise EvidenceError(
            f"not a record `rackform promote` writes (format {record.get('format')!r}, not "
            f"{FORMAT!r}): a record carries its signed evidence"
        )
    problem = legacy_key_problem()
    if problem:
        raise EvidenceError(problem)
    root = records_root(plan.effective.path, project)
    keys = trust.load(root / trust.KEYS_FILE)
    source = prepare(plan.effective.path, rule.source).plan
    proven = check(
        record.get("evidence"),
        keys,
        source,
        now=now or datetime.now(UTC),
        age=None,  # the age was judged when promoting (--max-age); the future never passes
        expected_nodes=source.node_range,
    )
    if record.get("subject") != proven.subject or record.get("source_digest") != source.digest:
        raise EvidenceError(
            f"the record names subject {record.get('subject')} and source digest "
            f"{record.get('source_digest')}, its evidence {proven.subject} and {source.digest}"
        )
    other = differences(proven.pin, pin_of(plan))
    if other:
        raise EvidenceError(
            f"{rule.target} would run other bits than {rule.source} validated: "
            f"{'; '.join(other)}: validate {rule.source} with them and promote again"
        )
    return proven
