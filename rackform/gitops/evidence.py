"""Validation evidence: a validation report sealed by the run that produced it, and the checks
`rackform promote` makes before it believes one.

A sealed report carries an `evidence` block: which cluster, environment and effective-blueprint
digest it validated, at which commit, when, and `content`, a SHA-256 over the canonical JSON of
everything else in the document and the block itself. Editing any check, figure or field by hand
breaks `content`. Where a signing key is configured (RACKFORM_EVIDENCE_KEY), the sealing run also
signs `content` with HMAC-SHA256, and `promote` then refuses an unsigned or wrongly signed
report. The key is read from the environment only and never printed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rackform.plan.model import Plan

KEY_ENV = "RACKFORM_EVIDENCE_KEY"
FORMAT = "rackform-evidence/1"
_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


class EvidenceError(Exception):
    """Evidence that may not back a promotion; the message says why, in one line."""


def _canon(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _content(doc: dict[str, Any]) -> str:
    block = {k: v for k, v in doc["evidence"].items() if k not in ("content", "signature")}
    body = {**{k: v for k, v in doc.items() if k != "evidence"}, "evidence": block}
    return "sha256:" + hashlib.sha256(_canon(body)).hexdigest()


def _sign(content: str, key: str) -> str:
    return "hmac-sha256:" + hmac.new(key.encode(), content.encode(), hashlib.sha256).hexdigest()


def passed(doc: dict[str, Any]) -> tuple[bool, str]:
    """A pass needs no failed check and at least one passed one (the Validate stage's rule)."""
    checks = doc.get("checks", [])
    failed = [c.get("name", "?") for c in checks if c.get("status") == "fail"]
    if failed:
        return False, f"failed checks: {', '.join(failed[:5])}"
    if not any(c.get("status") == "pass" for c in checks):
        return False, "no check passed (none ran)"
    return True, ""


def seal(
    report: dict[str, Any],
    *,
    plan: Plan,
    commit: str | None = None,
    now: datetime | None = None,
    environ: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The report with its evidence block (signed where the key is configured)."""
    env = os.environ if environ is None else environ
    doc = {k: v for k, v in report.items() if k != "evidence"}
    doc["evidence"] = {
        "format": FORMAT,
        "cluster": plan.name,
        "environment": plan.environment,
        "digest": plan.digest,
        "commit": commit,
        "validated_at": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
        "passed": passed(doc)[0],
    }
    doc["evidence"]["content"] = _content(doc)
    if env.get(KEY_ENV):
        doc["evidence"]["signature"] = _sign(doc["evidence"]["content"], env[KEY_ENV])
    return doc


def max_age(text: str) -> timedelta:
    m = _AGE.match(text.strip())
    if not m:
        raise EvidenceError(f"--max-age {text!r}: write a number and s, m, h or d (e.g. 24h)")
    return timedelta(**{_UNIT[m.group(2)]: float(m.group(1))})


@dataclass(frozen=True)
class Evidence:
    content: str
    validated_at: str
    commit: str | None
    signed: bool


def read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvidenceError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EvidenceError(f"{path}: not a validation report (not JSON: {exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
        raise EvidenceError(f"{path}: not a validation report (no `checks` list)")
    return doc


def verify(
    path: Path,
    source: Plan,
    *,
    age: timedelta,
    now: datetime | None = None,
    environ: dict[str, str] | None = None,
) -> Evidence:
    """The report at `path` backs a promotion from `source`'s environment, or EvidenceError."""
    env = os.environ if environ is None else environ
    doc = read(path)
    block = doc.get("evidence")
    if not isinstance(block, dict) or block.get("format") != FORMAT:
        raise EvidenceError(
            f"{path}: not sealed evidence (no `evidence` block): use the report a validating run "
            "wrote (`rackform smoke --json PATH --blueprint FILE --env ENV`)"
        )
    if block.get("content") != _content(doc):
        raise EvidenceError(f"{path}: edited after it was sealed (its content digest differs)")
    key = env.get(KEY_ENV)
    if key:
        sig = block.get("signature")
        if not sig:
            raise EvidenceError(f"{path}: unsigned, and {KEY_ENV} is set: signed evidence only")
        if not hmac.compare_digest(sig, _sign(block["content"], key)):
            raise EvidenceError(f"{path}: its signature does not match ({KEY_ENV})")
    if block.get("cluster") != source.name:
        raise EvidenceError(
            f"{path}: validated cluster {block.get('cluster')!r}, not {source.name!r}"
        )
    if block.get("environment") != source.environment:
        raise EvidenceError(
            f"{path}: validated environment {block.get('environment')!r}, "
            f"not {source.environment!r}"
        )
    if block.get("digest") != source.digest:
        raise EvidenceError(
            f"{path}: validated digest {block.get('digest')}, but {source.environment}'s digest "
            f"at this commit is {source.digest}: validate {source.environment} again"
        )
    ok, why = passed(doc)
    if not ok:
        raise EvidenceError(f"{path}: the validation failed ({why})")
    try:
        at = datetime.fromisoformat(block["validated_at"])
    except (KeyError, TypeError, ValueError):
        raise EvidenceError(f"{path}: no valid `validated_at` time") from None
    elapsed = (now or datetime.now(UTC)) - at
    if elapsed > age:
        raise EvidenceError(
            f"{path}: stale: validated {elapsed.total_seconds() / 3600:.1f} h ago, older than "
            f"--max-age {age.total_seconds() / 3600:g} h: validate {source.environment} again"
        )
    return Evidence(
        block["content"], block["validated_at"], block.get("commit"), "signature" in block
    )
