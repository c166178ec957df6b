"""Promotion: a blueprint reaches an environment declared with `promotion: {ENV: {from: SRC}}`
only through a promotion record, and the record is checked where the cluster is applied.

The rule. Evidence must be a passing, sealed report of SRC's effective-blueprint digest at the
commit being promoted. The record pins both digests: SRC's (what was validated) and ENV's (what
may be applied). ENV may differ from the validated SRC only by what makes them different
environments of one file, its own override block (`environments.ENV`) against SRC's: a change
to anything else (the base, or SRC's override) changes SRC's digest, so it needs new evidence;
a change to ENV's override changes ENV's digest, so it needs a new promotion (with evidence
still valid for SRC). `rackform up` and the Pulumi program (`pulumi up`) on ENV refuse unless
the record's target digest is ENV's digest now.

The record is a reviewable file, `promotions/<cluster>-<env>.json` at the top of the git
repository that holds the blueprint (else beside the Pulumi project); `rackform promote --commit` commits it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackform.blueprint.problems import BlueprintError
from rackform.engine import prepare
from rackform.plan.model import Plan

RECORDS = "promotions"


class PromotionRequired(Exception):
    """The environment takes the blueprint only by promotion and no matching record exists."""


@dataclass(frozen=True)
class Rule:
    target: str
    source: str


def rule_for(plan: Plan) -> Rule | None:
    """The promotion rule of `plan`'s environment, read from the base blueprint (validated
    through the engine, so a wrong environment name is a located BlueprintError)."""
    base = plan if plan.environment == "default" else prepare(plan.effective.path).plan
    rule = base.effective.blueprint.promotion.get(plan.environment)
    return None if rule is None else Rule(plan.environment, rule.source)


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


def require_promotion(plan: Plan, project: Path | None) -> None:
    """Raise PromotionRequired unless `plan`'s environment needs no promotion, or a record in
    `project` promotes exactly this digest into it. What `up` and the program call."""
    try:
        rule = rule_for(plan)
    except BlueprintError as exc:
        raise PromotionRequired("; ".join(map(str, exc.problems))) from None
    if rule is None:
        return
    path = record_path(records_root(plan.effective.path, project), plan.name, plan.environment)
    record = read_record(path)
    how = (
        f"run `rackform promote {plan.source} --from {rule.source} --to {rule.target} "
        "--evidence REPORT` with a passing report of "
        f"{rule.source}"
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
