"""Configure and Validate as resources (Python dynamic providers) that depend on the nodes, so one
`pulumi up` provisions, then configures, then validates, in that order.

Configure reruns only when its content hash changes: the roles' files, the variables of what
they install (`rackform.plan.inventory.configure_vars`: never smoke steps, thresholds, owner or
the blueprint's digest) and the inventory. Its `read` (what `pulumi refresh` calls) runs the
roles in check mode and reports the hosts that drifted, so the next `up` converges them again.
On a cluster with a Slurm controller among its hosts, an update whose change needs a drain rolls
it batch by batch before the converge.

Validate runs on create, when the configuration or the nodes change, and when asked
(`rackform up --revalidate` sets the `request` input); a cosmetic edit never reruns it. Its
`boot` input is `rackform up`'s last wait for the nodes configured at boot, as one check
(`boot_reports`): the stage adds it to the report it makes, and a new wait's outcome alone
judges the last report again with it, without running anything on the nodes (the statement
keeps the time of that run). It never raises for a failed check: the report and `passed` land
in its outputs and the stack's, and the program fails `up` afterwards when
`validation.strict`, so the state keeps every resource and the evidence of what failed. With
the report it outputs `evidence`: its in-toto statement about the run, signed where the deploy
holds the signing key, the only evidence `rackform promote` accepts.

The work itself is given to the providers as functions by whoever builds the program; this
module imports none of it. Configure's converges the nodes with the Ansible roles; Validate's
runs the cluster's checks (on an inference cluster read-only serving checks only, never a
training job or a storage write on nodes that serve). Each is keyword-only, JSON in, JSON out:

    work(*, inventory: dict, group_vars: dict, access: dict | None) -> dict
        # Configure's converge: a summary; raises on failure
    drift(*, inventory: dict, group_vars: dict, access: dict | None) -> dict
        # {"hosts": {host: ["role : task", ...]}}: what a converge would change (check mode)
    roll(*, inventory: dict, group_vars: dict, rollout: dict, known: dict, access) -> dict
        # a change that needs a drain, batch by batch, before the converge of an update
    record(*, group_vars: dict, rollout: dict) -> None
        # what the nodes run, after each converge of a cluster that rolls
    work(*, inventory: dict, group_vars: dict, validation: dict, access) -> dict
        # Validate's checks: {"checks": [{"name", "status": "pass"|"fail"|"not-run",
        #                                 "measured", "expected", "unit"}]}

`access` is how the controller's SSH reaches stack-created nodes (the stack's private key and
the host key its nodes were given), or None where the user's own SSH setup reaches them.

A provider goes into the stack's state pickled, its work with it by reference. One pickled by a
release that named its work by "module:function" strings gets today's functions for those names
when it is unpickled (`recorded_work`), since `refresh` and `destroy` run the provider the state
holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from rackform.evidence.boot_record import BOOT_CHECK, recorded_check
from rackform.evidence.signing import SigningError, payload
from rackform.evidence.statement import attest
from rackform.evidence.verdict import verdict
from rackform.plan.inventory import inventory_hosts

Work = Callable[..., dict]

CONFIGURE_INPUTS = (
    "cluster",
    "inventory",
    "group_vars",
    "roles_hash",
    "content_hash",
    "expected_nodes",
    "access",
    "rollout",
)
VALIDATE_INPUTS = (
    "cluster",
    "inventory",
    "group_vars",
    "validation",
    "digest",
    "configured_hash",
    "request",
    "access",
    "attest",
    "boot",
)
# What makes a validation run again: new nodes, a new configuration, or a request. Not the
# digest, the thresholds or the smoke steps: a cosmetic edit never reruns the smoke job on a
# live cluster (they still travel with the next run that happens).
VALIDATE_TRIGGERS = ("cluster", "inventory", "configured_hash", "request")


class StageUnavailable(Exception):
    """A stage's provider holds no work it can run (none was given, or a recorded name that no
    rackform since knows)."""


class ValidationFailed(Exception):
    """A strict validation found a failing check (or nothing it could check); raised by the
    program after the report is in the outputs."""


def recorded_work(state: dict[str, Any]) -> dict[str, Any]:
    """A stage provider's attributes as they were pickled, with each piece of work an earlier
    release recorded as a "module:function" string replaced by the function it names today
    (`rackform.stage_work.EARLIER`); a name no release since knows stays as it is, and running
    it raises StageUnavailable."""
    if not any(isinstance(v, str) for v in state.values()):
        return state
    # Only a stack's state written before the stages took functions gets here.
    from rackform.stage_work import EARLIER

    return {k: EARLIER.get(v, v) if isinstance(v, str) else v for k, v in state.items()}


class _Stage(ResourceProvider):
    """What both stages' providers share: their work, found again when they are unpickled."""

    serialize_as_secret_always = False

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(recorded_work(state))

    @staticmethod
    def _work(fn: Work | str | None, stage: str, what: str) -> Work:
        if callable(fn):
            return fn
        done = "configured" if stage == "configure" else "validated"
        why = (
            f"{fn.replace(':', '.')} is not in this rackform checkout"
            if isinstance(fn, str)
            else f"its provider was given no {what} work"
        )
        raise StageUnavailable(
            f"{stage}: {why}, so nothing was {done}; install a rackform that has it (the "
            "Ansible roles / the smoke validator) and run `pulumi up` again"
        )


def content_hash(roles: str, group_vars: dict, inventory: dict) -> str:
    body = {"roles": roles, "group_vars": group_vars, "inventory": inventory}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _inputs(props: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: props.get(k) for k in keys}


class ConfigureProvider(_Stage):
    """`work` converges the nodes, `drift` runs the same roles in check mode (refresh), `roll`
    rolls a change that needs a drain and `record` writes what the nodes then run; one that is
    not given raises StageUnavailable where it would run."""

    def __init__(
        self,
        work: Work | None = None,
        drift: Work | None = None,
        roll: Work | None = None,
        record: Work | None = None,
    ):
        super().__init__()
        self.work = work
        self.drift = drift
        self.roll = roll
        self.record = record

    def _run(self, props: dict[str, Any]) -> dict[str, Any]:
        hosts = inventory_hosts(props["inventory"])
        low, high = props["expected_nodes"]["min"], props["expected_nodes"]["max"]
        if not low <= len(hosts) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise RuntimeError(
                f"configure: the inventory has {len(hosts)} hosts but the blueprint has {want} "
                "nodes; refusing to configure part of the cluster"
            )
        result = self._work(self.work, "configure", "converge")(
            inventory=props["inventory"],
            group_vars=props["group_vars"],
            access=props.get("access"),
        )
        if props.get("rollout"):
            self._work(self.record, "configure", "record")(
                group_vars=props["group_vars"], rollout=props["rollout"]
            )
        return {**_inputs(props, CONFIGURE_INPUTS), "result": result, "drift": {}}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"{props['cluster']}-configure", self._run(props))

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # The hash covers roles, variables and inventory; anything else (a cosmetic input) is not
        # a reason to run Ansible over a whole cluster again.
        changed = olds.get("content_hash") != news.get("content_hash")
        replaces = ["cluster"] if olds.get("cluster") != news.get("cluster") else []
        return DiffResult(changes=changed or bool(replaces), replaces=replaces, stables=[])

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        """A change to node software that needs a drain, on a cluster with a scheduler (the
        `rollout` input), rolls batch by batch first (`roll`); the converge
        after it finds those nodes changed and converges the rest (joined nodes, what applies
        in place, drift). A rollout that stops fails the update: the next `up` resumes it."""
        rolled = None
        if news.get("rollout") and olds.get("group_vars") is not None:
            known = {
                "variables": olds["group_vars"],
                "nodes": (olds.get("rollout") or {}).get("nodes") or {},
            }
            rolled = self._work(self.roll, "configure", "rolling")(
                inventory=news["inventory"],
                group_vars=news["group_vars"],
                rollout=news["rollout"],
                known=known,
                access=news.get("access"),
            )
        outs = self._run(news)
        return UpdateResult(outs if rolled is None else {**outs, "rolled": rolled})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        """What `pulumi refresh` sees: the roles in check mode over the recorded inventory. A
        host a converge would change is drift: it is named in `drift`, and the recorded content
        hash no longer matches, so the next `up` converges again."""
        if not props.get("inventory"):
            return ReadResult(id_, props)
        found = self._work(self.drift, "configure", "drift")(
            inventory=props["inventory"],
            group_vars=props["group_vars"],
            access=props.get("access"),
        )
        drifted = {h: tasks for h, tasks in sorted(found.get("hosts", {}).items()) if tasks}
        outs = {**props, "drift": drifted}
        if drifted:
            outs["content_hash"] = f"drifted:{','.join(drifted)}"
        return ReadResult(id_, outs)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Configuration stays on the hosts; removing the resource changes nothing on them."""
        return None


class ValidateProvider(_Stage):
    """`work` runs the cluster's checks and returns their report."""

    def __init__(self, work: Work | None = None):
        super().__init__()
        self.work = work

    def _run(self, props: dict[str, Any], in_service: list[str] | None = None) -> dict[str, Any]:
        report = self._work(self.work, "validate", "validation")(
            inventory=props["inventory"],
            group_vars=props["group_vars"],
            validation=props["validation"],
            access=props.get("access"),
            in_service=in_service or [],
        )
        return self._judged(props, with_boot(report, props.get("boot")))

    def _judged(
        self, props: dict[str, Any], report: dict[str, Any], at: datetime | None = None
    ) -> dict[str, Any]:
        # The evidence `rackform promote` accepts: an in-toto statement about this run (what it
        # ran: the pin; on which nodes; when), signed here, in the source deploy that holds
        # RACKFORM_EVIDENCE_SIGNING_KEY (read now, never stored with the provider or in state).
        signed = attest(report, props["attest"], inventory_hosts(props["inventory"]), now=at)
        return {**_inputs(props, VALIDATE_INPUTS), **judge(report), "evidence": signed}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"{props['cluster']}-validate", self._run(props))

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = _triggered(olds, news) or _boot(olds) != _boot(news)
        return DiffResult(changes=changed, replaces=[], stables=[])

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        """A run on the nodes; or, where only the wait for the nodes configured at boot has a
        new outcome, the last run's report judged again with it, nothing run on the nodes (what
        was checked, where and when stay the last run's)."""
        if _triggered(olds, news) or not isinstance(olds.get("report"), dict):
            return UpdateResult(self._run(news, in_service(olds)))
        report = with_boot(olds["report"], news.get("boot"))
        return UpdateResult(
            self._judged({**olds, "boot": _boot(news)}, report, _validated_at(olds))
        )

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        return None


def in_service(olds: dict[str, Any]) -> list[str]:
    """The nodes the last run passed (each sent a report and none of its checks failed): on a
    serving cluster they take traffic now, so a run again gives them the read-only checks
    only, never the serving smoke job (`acceptance.cluster.validate_cluster`)."""
    report = olds.get("report")
    if not isinstance(report, dict) or not isinstance(report.get("nodes"), dict):
        return []
    failed = {
        c.get("node")
        for c in report.get("checks") or []
        if isinstance(c, dict) and c.get("status") == "fail"
    }
    return sorted(h for h in report["nodes"] if isinstance(h, str) and h not in failed)


def _triggered(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    return any(olds.get(k) != news.get(k) for k in VALIDATE_TRIGGERS)


def _boot(props: dict[str, Any]) -> str:
    """The `boot` input ("" where none: a stack made before it had one)."""
    return props.get("boot") or ""


def with_boot(report: dict[str, Any], boot: str | None) -> dict[str, Any]:
    """`report` with the recorded wait as its `boot_reports` check (replacing an earlier one);
    as it was, less any such check, where there is none."""
    checks = [c for c in report.get("checks") or [] if c.get("name") != BOOT_CHECK]
    check = recorded_check(boot)
    return {**report, "checks": checks + ([check] if check else [])}


def _validated_at(olds: dict[str, Any]) -> datetime | None:
    """When the last run's statement says it validated (None: unreadable, then now)."""
    try:
        at = json.loads(payload(olds["evidence"]))["predicate"]["validated_at"]
        return datetime.fromisoformat(at).astimezone(UTC)
    except (KeyError, TypeError, ValueError, SigningError):
        return None


def judge(report: dict[str, Any]) -> dict[str, Any]:
    """The stage's outputs for a report: it, its verdict (rackform.evidence.verdict) and, where
    it failed, why in one line."""
    passed, why = verdict(report)
    return {"report": report, "passed": passed, "failure": why}


class Configure(pulumi.dynamic.Resource, module="rackform", name="Configure"):
    content_hash: pulumi.Output[str]
    result: pulumi.Output[dict]
    drift: pulumi.Output[dict]

    def __init__(
        self,
        name: str,
        props: dict[str, Any],
        provider: ConfigureProvider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        args = {**{k: props.get(k) for k in CONFIGURE_INPUTS}, "result": None, "drift": None}
        secret = pulumi.ResourceOptions(additional_secret_outputs=["access"])
        super().__init__(provider, name, args, pulumi.ResourceOptions.merge(opts, secret))


class Validate(pulumi.dynamic.Resource, module="rackform", name="Validate"):
    report: pulumi.Output[dict]
    passed: pulumi.Output[bool]
    failure: pulumi.Output[str]
    evidence: pulumi.Output[dict]

    def __init__(
        self,
        name: str,
        props: dict[str, Any],
        provider: ValidateProvider,
        opts: pulumi.ResourceOptions | None = None,
    ):
        args = {
            **{k: props.get(k) for k in VALIDATE_INPUTS},
            **{"report": None, "passed": None, "failure": None, "evidence": None},
        }
        secret = pulumi.ResourceOptions(additional_secret_outputs=["access"])
        super().__init__(provider, name, args, pulumi.ResourceOptions.merge(opts, secret))
