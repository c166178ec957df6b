"""What a validation proved things about, and what a promotion pins: everything that reaches the
nodes, not only the blueprint.

    blueprint  the environment's effective-blueprint digest (`loader.digest_of`)
    promotion  the file's promotion rules ({target: source}): re-pointing one changes the pin
    rackform   the rackform version that compiled and ran it
    roles      the Configure stage's hash of what the collection ships to nodes (its roles, the
               validators in smoke_train's files, modules, playbooks: `shipped.roles_hash`)
    images     the machine images where the plan knows them (a pinned AMI id; else the lookup
               the launch resolves, which is all the plan can know before `up`)

The Validate stage puts the pin of the run in its signed statement, whose subject is the pin's
digest; `up` on a promoted environment compares that pin with its own (`differences`): anything
but the blueprint digest (which differs by the environment's own override) must be the same.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rackform import __version__
from rackform.evidence import shipped
from rackform.evidence.signing import canon
from rackform.paths import collection
from rackform.plan.model import Plan

# What must be identical between the validated source and the promoted target.
SAME_BITS = ("rackform", "roles", "promotion", "images")


def rules(plan: Plan) -> dict[str, str]:
    """The file's promotion rules, {target: source} (as the loader read them)."""
    return dict(plan.effective.promotion)


def pin_of(plan: Plan, roles: str | None = None) -> dict[str, Any]:
    """`roles`: the Configure stage's roles hash, where the caller has it already."""
    if roles is None:
        roles = shipped.roles_hash(collection())
    return {
        "blueprint": plan.digest,
        "promotion": rules(plan),
        "rackform": __version__,
        "roles": roles,
        "images": dict(plan.image_pin),
    }


def digest(pin: dict[str, Any]) -> str:
    """The statement's subject: the hex SHA-256 of the pin's canonical JSON."""
    return hashlib.sha256(canon(pin)).hexdigest()


def differences(validated: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What the target would run that the source did not validate, one phrase each."""
    out = []
    for key in SAME_BITS:
        if validated.get(key) != now.get(key):
            out.append(f"{key} {_short(now.get(key))} (validated: {_short(validated.get(key))})")
    return out


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else canon(value).decode()
    return text if len(text) <= 80 else text[:79] + "…"
