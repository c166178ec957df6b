"""`rackform promote FILE --from SRC --to DST --evidence REPORT [--max-age 24h] [--commit]`:
check the evidence and record the promotion (rackform/gitops/promotion.py states the rule).

Every check comes before anything is written: a refused promotion leaves the repository as it
was (exit 2, one line). Promoting what is already recorded (same target digest, same evidence)
is a no-op. With --commit the record is committed (only that file)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import File, fail, for_action, prepared, user_error


@app.command()
def promote(
    file: File,
    source: Annotated[str, typer.Option("--from", help="The validated environment.")],
    target: Annotated[str, typer.Option("--to", help="The environment to promote into.")],
    evidence: Annotated[
        Path, typer.Option("--evidence", help="The sealed validation report of --from.")
    ],
    age: Annotated[
        str, typer.Option("--max-age", help="Refuse evidence older than this (s, m, h, d).")
    ] = "24h",
    commit: Annotated[
        bool, typer.Option("--commit", help="Commit the promotion record (git).")
    ] = False,
) -> None:
    """Promote a blueprint from one environment to the next on a passing validation report
    of the source's digest at this commit; write the record that `up` on the target needs."""
    from rackform.gitops import gitrev
    from rackform.gitops.evidence import EvidenceError, max_age, verify
    from rackform.gitops.promotion import read_record, record_path, records_root

    base = prepared(file, None).plan
    declared = base.effective.blueprint.promotion
    rule = declared.get(target)
    if rule is None or rule.source != source:
        at = ("promotion", target, "from") if rule else ("promotion",)
        why = (
            f"{target} is promoted from {rule.source}, not {source}"
            if rule
            else f"{target} is not declared as promoted (promotion: {{{target}: {{from: {source}}}}})"
        )
        raise fail([base.effective.problem(at if declared else (), why)])
    src = for_action(file, source, "nothing was promoted").plan
    dst = for_action(file, target, "nothing was promoted").plan
    try:
        limit = max_age(age)
        repo = gitrev.toplevel(file.resolve().parent)
        rel = str(file.resolve().relative_to(repo))
        if gitrev.git(repo, "status", "--porcelain", "--", rel).stdout.strip():
            raise user_error(
                f"{file}: has uncommitted changes; commit the blueprint first (a promotion "
                "is of a commit)"
            )
        head = gitrev.head_commit(repo)
        ev = verify(evidence, src, age=limit)
    except (EvidenceError, gitrev.GitError) as exc:
        raise user_error(str(exc)) from None
    path = record_path(records_root(dst.effective.path, dst.project), dst.name, target)
    old = read_record(path) if path.exists() else None
    if (
        old
        and old.get("target_digest") == dst.digest
        and old.get("evidence", {}).get("content") == ev.content
    ):
        typer.echo(f"{dst.name}: {source} -> {target} already promoted ({path}); nothing to do")
        return
    record = {
        "cluster": dst.name,
        "blueprint": rel,
        "from": source,
        "to": target,
        "commit": head,
        "source_digest": src.digest,
        "target_digest": dst.digest,
        "evidence": {
            "file": str(evidence),
            "content": ev.content,
            "validated_at": ev.validated_at,
            "commit": ev.commit,
            "signed": ev.signed,
        },
        "promoted_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "promoted_by": gitrev.user(repo),
    }
    previous = path.read_bytes() if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    typer.echo(f"{dst.name}: promoted {source} -> {target} ({dst.digest}); record {path}")
    if commit:
        try:
            sha = gitrev.commit_files(
                repo,
                [path],
                f"promote {dst.name}: {source} -> {target}\n\nsource digest {src.digest}\n"
                f"target digest {dst.digest}\nevidence {ev.content} ({ev.validated_at})",
            )
        except gitrev.GitError as exc:
            if previous is None:  # a failed promotion leaves nothing behind
                path.unlink()
            else:
                path.write_bytes(previous)
            raise user_error(f"the promotion record was not committed: {exc}") from None
        typer.echo(f"committed {sha[:12]}")
