"""Validation evidence: the source environment's own Validate-stage report, as an in-toto
statement signed by that environment's deploy, and the checks a verifier makes before it
believes one. The verifier, not the producer, decides what a statement proves.

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "rackform/<cluster>/<env>", "digest": {"sha256": <pin digest>}}],
     "predicateType": "https://rackform.dev/attestations/validation/v1",
     "predicate": {"producer": "rackform Validate stage", "stack", "cluster", "environment",
                   "pin": {blueprint, promotion, rackform, roles, images} (`pin`),
                   "validated_at", "nodes": {"expected": [hosts], "reported": [hosts]},
                   "passed", "report": {"checks": [...], "nodes": {...}}}}

It travels as a DSSE envelope (`signing`) in the stack output `evidence`. A
`rackform smoke` report is not evidence: it ran wherever it was started, not on the cluster's
nodes through the stage that counts them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rackform.evidence import pin as pins
from rackform.evidence.serving import measured, serving_problem
from rackform.evidence.signing import SigningError, envelope, load_signing_key
from rackform.evidence.trust import Trusted, verified_payload
from rackform.evidence.verdict import verdict
from rackform.plan.model import Plan

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://rackform.dev/attestations/validation/v1"
PRODUCER = "rackform Validate stage"
# Clocks of the deploy runner and the verifier may disagree a little, never by hours.
SKEW = timedelta(minutes=5)
_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
NOT_EVIDENCE = (
    "a `rackform smoke` report is not evidence: it ran where it was started, not through "
    "the Validate stage on the cluster's nodes; promote reads the source stack's `evidence` "
    "output"
)


class EvidenceError(Exception):
    """Evidence that may not back a promotion; the message says why, in one line."""


def statement(
    report: dict[str, Any], about: Mapping[str, Any], hosts: list[str], now: datetime
) -> dict[str, Any]:
    """The statement the Validate stage makes about its run. `about`: stack, cluster,
    environment and pin, given to the stage by the program."""
    pin = about["pin"]
    reported = report.get("nodes")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": f"rackform/{about['cluster']}/{about['environment']}",
                "digest": {"sha256": pins.digest(pin)},
            }
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "producer": PRODUCER,
            "stack": about["stack"],
            "cluster": about["cluster"],
            "environment": about["environment"],
            "pin": pin,
            "validated_at": now.isoformat(timespec="seconds"),
            "nodes": {
                "expected": sorted(hosts),
                "reported": sorted(reported) if isinstance(reported, dict) else [],
            },
            "passed": verdict(report)[0],
            "report": report,
        },
    }


def attest(
    report: dict[str, Any],
    about: Mapping[str, Any],
    hosts: list[str],
    *,
    now: datetime | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The signed envelope of the stage's statement (unsigned where the deploy has no key)."""
    st = statement(report, about, hosts, now or datetime.now(UTC))
    return envelope(st, load_signing_key(environ))


@dataclass(frozen=True)
class Proven:
    """What a verified statement says, once every check passed."""

    subject: str  # sha256:<pin digest>
    pin: dict[str, Any]
    validated_at: str
    nodes: int
    statement: dict[str, Any]
    # An inference cluster's serving smoke job, measured: the median decode rate and cost per
    # million output tokens across its nodes (`serving.measured`); empty for training.
    serving: dict[str, Any] = field(default_factory=dict)


def max_age(text: str) -> timedelta:
    m = _AGE.match(text.strip())
    if not m:
        raise EvidenceError(f"--max-age {text!r}: write a number and s, m, h or d (e.g. 24h)")
    return timedelta(**{_UNIT[m.group(2)]: float(m.group(1))})


def from_outputs(outputs: Mapping[str, Any], stack: str) -> dict[str, Any]:
    """The envelope in a stack's outputs (read through the Automation API)."""
    found = outputs.get("evidence")
    if not found:
        raise EvidenceError(
            f"stack {stack} has no `evidence` output: run `rackform up` on it with this rackform "
            "(its Validate stage writes it), then promote"
        )
    return found


def from_file(path: Path) -> dict[str, Any]:
    """An envelope saved from the outputs (`pulumi stack output evidence --json`)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvidenceError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EvidenceError(f"{path}: not evidence (not JSON: {exc})") from None
    if isinstance(doc, dict) and ("checks" in doc or "evidence" in doc):
        raise EvidenceError(f"{path}: {NOT_EVIDENCE}")
    return doc


def check(
    env: Any,
    keys: dict[str, Trusted],
    source: Plan,
    *,
    now: datetime,
    age: timedelta | None,
    expected_nodes: tuple[int, int],
) -> Proven:
    """The envelope `env` holds a statement, signed by a key trusted for `source`'s environment,
    that `source` (its digest now) passed validation on every node, not from the future and,
    with `age`, no older than it. `expected_nodes`: the source's node count (low, high)."""
    try:
        body = verified_payload(env, keys, source.environment)
    except SigningError as exc:
        raise EvidenceError(f"evidence: {exc}") from None
    try:
        st = json.loads(body)
    except ValueError:
        raise EvidenceError("evidence: its payload is not JSON") from None
    pred = st.get("predicate") if isinstance(st, dict) else None
    if (
        not isinstance(pred, dict)
        or not isinstance(pred.get("pin"), dict)
        or st.get("_type") != STATEMENT_TYPE
        or st.get("predicateType") != PREDICATE_TYPE
    ):
        raise EvidenceError("evidence: not a rackform validation statement")
    if pred.get("producer") != PRODUCER:
        raise EvidenceError(f"evidence: produced by {pred.get('producer')!r}: {NOT_EVIDENCE}")
    try:
        subject = st["subject"][0]["digest"]["sha256"]
    except (KeyError, IndexError, TypeError):
        subject = None
    if subject != pins.digest(pred.get("pin") or {}):
        raise EvidenceError("evidence: its subject is not the digest of the pin it states")
    for what, want in (("cluster", source.name), ("environment", source.environment),
                       ("stack", source.stack)):  # fmt: skip
        if pred.get(what) != want:
            raise EvidenceError(f"evidence: validated {what} {pred.get(what)!r}, not {want!r}")
    validated = pred["pin"].get("blueprint")
    if validated != source.digest:
        raise EvidenceError(
            f"evidence: validated digest {validated}, but {source.environment}'s digest at this "
            f"commit is {source.digest}: `rackform up --env {source.environment}` again"
        )
    ok, why = verdict(pred.get("report") or {})
    if not ok or pred.get("passed") is not True:
        raise EvidenceError(f"evidence: the validation failed ({why or 'passed: false'})")
    _every_node(pred.get("nodes") or {}, expected_nodes)
    served: dict[str, Any] = {}
    if source.purpose == "inference":
        report = pred.get("report") or {}
        why = serving_problem(report, pred["nodes"]["expected"])
        if why:
            raise EvidenceError(f"evidence: {why}")
        prices = {t.usd_per_node_hour for t in source.cost.tokens}
        served = measured(report, prices.pop() if len(prices) == 1 else None)
    at = _time(pred.get("validated_at"), now, age, source.environment)
    return Proven(f"sha256:{subject}", pred["pin"], at, len(pred["nodes"]["expected"]), st, served)


def _every_node(nodes: dict[str, Any], expected: tuple[int, int]) -> None:
    want, got = nodes.get("expected") or [], nodes.get("reported") or []
    low, high = expected
    if not low <= len(want) <= high:
        count = str(low) if low == high else f"{low} to {high}"
        raise EvidenceError(f"evidence: validated {len(want)} nodes, the blueprint has {count}")
    missing = sorted(set(want) - set(got))
    if missing:
        raise EvidenceError(
            f"evidence: no report from {', '.join(missing)}: not every node counted"
        )


def _time(text: Any, now: datetime, age: timedelta | None, env: str) -> str:
    try:
        at = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise EvidenceError("evidence: no valid `validated_at` time") from None
    if at.tzinfo is None:
        raise EvidenceError("evidence: `validated_at` has no time zone")
    elapsed = now - at
    if elapsed < -SKEW:
        raise EvidenceError(
            f"evidence: validated_at {text} is {-elapsed.total_seconds() / 60:.0f} min in the "
            f"future (more than the {SKEW.total_seconds() / 60:.0f} min clock skew allowed)"
        )
    if age is not None and elapsed > age:
        raise EvidenceError(
            f"evidence: stale: validated {elapsed.total_seconds() / 3600:.1f} h ago, older than "
            f"--max-age {age.total_seconds() / 3600:g} h: `rackform up --env {env} --revalidate`"
        )
    return text
