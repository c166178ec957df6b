"""Making a promotion: what `rackform promote` does (`stack.promotion` states the rule, and verifies
a record where the cluster is applied).

The evidence is the source stack's `evidence` output, read through the Automation API (or the
same envelope saved to a file with `--evidence`), verified against `promotion-keys.yaml` exactly
as `up` will verify it, plus `--max-age`. Every check comes before anything is written: the rule
the blueprint declares, preflight on both environments, a committed blueprint, the evidence. Then the record is written whole
(a temporary file renamed over it) and, when asked, committed alone; a commit that fails puts
the file, the index and the directory back as they were, so a refused or failed promotion
leaves the repository exactly as it found it. Promoting what is already recorded (same target
digest, same evidence) writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rackform.blueprint.problems import BlueprintError
from rackform.engine import prepare_all, require_clear
from rackform.evidence import trust
from rackform.evidence.pin import differences, pin_of
from rackform.evidence.signing import SigningError, legacy_key_problem
from rackform.evidence.statement import EvidenceError, Proven, check, from_file, from_outputs
from rackform.gitops import gitrev
from rackform.plan.model import Plan
from rackform.stack.promotion import FORMAT, read_record, record_path, records_root
from rackform.stack.workspace import WorkspaceError, stack_outputs


class Refused(Exception):
    """The promotion was not made (evidence, git); the message says why, in one line."""


@dataclass(frozen=True)
class Promoted:
    cluster: str
    source: str
    target: str
    target_digest: str
    path: Path  # the record
    changed: bool  # False: this exact promotion was already recorded
    commit: str | None = None  # the commit that holds the record, when asked to commit
    # An inference cluster's serving smoke job as measured (`evidence.serving.measured`).
    serving: dict[str, Any] = field(default_factory=dict)


def promote(
    file: Path,
    source: str,
    target: str,
    *,
    age: timedelta,
    evidence: Path | None = None,
    outputs: Callable[[Plan], dict[str, Any]] | None = None,
    commit: bool = False,
    now: datetime | None = None,
) -> Promoted:
    """Promote `file` from `source` to `target` on the source stack's evidence (`outputs`: how
    a stack's outputs are read, the Automation API by default; `evidence`: an envelope file
    instead). Raises BlueprintError (the file, or a rule it does not declare, located),
    engine.Blocked (preflight errors in either environment) or Refused; in each case nothing
    was written."""
    # One read of the file, each environment compiled once: the base declares the rule, the
    # two environments are what was validated and what may be applied.
    by_env = {p.plan.environment: p for p in prepare_all(file)}
    base = by_env["default"].plan
    _check_rule(base, source, target)
    src, dst = by_env[source], by_env[target]
    require_clear(src, dst)
    src_plan, dst_plan = src.plan, dst.plan
    now = now or datetime.now(UTC)
    try:
        problem = legacy_key_problem()
        if problem:
            raise Refused(problem)
        repo = gitrev.toplevel(file.resolve().parent)
        rel = str(file.resolve().relative_to(repo))
        if gitrev.git(repo, "status", "--porcelain", "--", rel).stdout.strip():
            raise Refused(
                f"{file}: has uncommitted changes; commit the blueprint first (a promotion "
                "is of a commit)"
            )
        head = gitrev.head_commit(repo)
        envelope = _evidence(src_plan, evidence, outputs)
        keys = trust.load(records_root(file, dst_plan.project) / trust.KEYS_FILE)
        ev = check(envelope, keys, src_plan, now=now, age=age, expected_nodes=src_plan.node_range)
        other = differences(ev.pin, pin_of(src_plan))
        if other:
            raise Refused(
                f"{source} changed since it was validated: {'; '.join(other)}: "
                f"`rackform up --env {source} --revalidate`, then promote"
            )
        who = gitrev.user(repo)
    except (EvidenceError, SigningError, WorkspaceError, gitrev.GitError) as exc:
        raise Refused(str(exc)) from None
    path = record_path(
        records_root(dst_plan.effective.path, dst_plan.project), dst_plan.name, target
    )
    done = Promoted(
        dst_plan.name, source, target, dst_plan.digest, path, changed=False, serving=ev.serving
    )
    old = read_record(path) if path.exists() else None
    if old and old.get("target_digest") == dst_plan.digest and old.get("evidence") == envelope:
        return done
    record = _record(rel, head, src_plan, dst_plan, envelope, ev, who, now)
    message = (
        f"promote {dst_plan.name}: {source} -> {target}\n\nsource digest {src_plan.digest}\n"
        f"target digest {dst_plan.digest}\nevidence {ev.subject} ({ev.validated_at}, "
        f"{ev.nodes} nodes)"
    )
    sha = write_record(repo, path, record, message if commit else None)
    return replace(done, changed=True, commit=sha)


def _evidence(
    src: Plan, path: Path | None, outputs: Callable[[Plan], dict[str, Any]] | None
) -> dict[str, Any]:
    if path is not None:
        return from_file(path)
    if outputs is None:

        def outputs(plan: Plan) -> dict[str, Any]:
            return stack_outputs(plan, plan.project)

    return from_outputs(outputs(src), src.stack)


def _check_rule(base: Plan, source: str, target: str) -> None:
    """The blueprint declares `target` as promoted from `source` (located where it does not)."""
    declared = dict(base.effective.promotion)
    rule = declared.get(target)
    if rule == source:
        return
    at = ("promotion", target, "from") if rule else ("promotion",)
    why = (
        f"{target} is promoted from {rule}, not {source}"
        if rule
        else f"{target} is not declared as promoted (promotion: {{{target}: {{from: {source}}}}})"
    )
    raise BlueprintError([base.effective.problem(at if declared else (), why)])


def _record(
    rel: str,
    head: str,
    src: Plan,
    dst: Plan,
    envelope: dict[str, Any],
    ev: Proven,
    who: str,
    now: datetime,
) -> dict[str, Any]:
    # Only `evidence` is signed; the rest says the same in the clear for reviewers, and `up`
    # checks that each copy agrees with the signed statement and the blueprint now.
    return {
        "format": FORMAT,
        "cluster": dst.name,
        "blueprint": rel,
        "from": src.environment,
        "to": dst.environment,
        "commit": head,
        "source_digest": src.digest,
        "target_digest": dst.digest,
        "subject": ev.subject,
        "validated_at": ev.validated_at,
        "nodes": ev.nodes,
        "evidence": envelope,
        # What the serving smoke job measured (an inference cluster), said in the clear.
        **({"serving": ev.serving} if ev.serving else {}),
        "promoted_at": now.isoformat(timespec="seconds"),
        "promoted_by": who,
    }


def write_record(repo: Path, path: Path, record: dict[str, Any], message: str | None) -> str | None:
    """Write `record` at `path` whole and, with a `message`, commit it alone (the new commit).
    When the commit fails, the file, git's index and the directory are put back as they were
    before, and Refused says why."""
    previous = path.read_bytes() if path.exists() else None
    made_dir = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _write_whole(path, (json.dumps(record, indent=2) + "\n").encode())
        return None if message is None else gitrev.commit_files(repo, [path], message)
    except (OSError, gitrev.GitError) as exc:
        _restore(repo, path, previous, made_dir)
        what = "committed" if isinstance(exc, gitrev.GitError) else "written"
        raise Refused(f"the promotion record was not {what}: {exc}") from None


def _write_whole(path: Path, data: bytes) -> None:
    """`path` holds `data` or what it held before, never a part: a temporary file beside it,
    flushed to disk, then renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _restore(repo: Path, path: Path, previous: bytes | None, made_dir: bool) -> None:
    # `git add` may have staged the new record before the commit failed: unstage it too.
    gitrev.git(repo, "reset", "-q", "--", str(path), check=False)
    if previous is None:
        path.unlink(missing_ok=True)
        if made_dir:
            with contextlib.suppress(OSError):  # something else was put there meanwhile: keep it
                path.parent.rmdir()
    else:
        _write_whole(path, previous)
