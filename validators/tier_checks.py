"""The `checkpoint_tier` check, from what validators/tier.py's ObjectTier.close says of its
copies: for the resumable job (one tier, its first node's copies) and for the smoke job (each
node's own copy of the round trip's checkpoint, under `<url>/<host>`)."""

from __future__ import annotations

from validators import report


def unused(url: str, error: str) -> dict:
    """The summary of a tier that could not be used at all (no boto3, a bad store): what
    ObjectTier.close returns, with `error` its one error."""
    return {"url": url, "copies": [], "errors": [error], "superseded": [], "newest": 0,
            "asked": 0, "unfinished": False, "pending": 0}  # fmt: skip


def _trouble(tier: dict, waited_s: float) -> str | None:
    """Why the tier's copies fall short: an error, one still running at the deadline, or the
    newest checkpoint not on the tier; None when they do not."""
    errors, asked, newest = tier["errors"], tier["asked"], tier.get("newest") or 0
    if errors:
        return "; ".join(errors)
    if tier["unfinished"]:
        return f"copies still running after {waited_s:g} s"
    if asked and not any(c["step"] == newest for c in tier["copies"]):
        return f"the newest checkpoint (step {newest}) is not on the tier"
    return None


def _gbps(copies: list[dict]) -> float:
    return sum(c["bytes"] for c in copies) / max(1e-9, sum(c["seconds"] for c in copies)) / 1e9


def tier_check(tier: dict, waited_s: float) -> report.Check:
    """The newest checkpoint this run wrote is complete on the tier, and no copy failed: the
    copies' count, throughput and lag (from the checkpoint's publishing to its copy being
    complete). An older one still queued when a newer came is superseded, not copied: the
    node's directory keeps only the newest, and so does what a restore needs."""
    copies, asked = tier["copies"], tier["asked"]
    skipped = tier.get("superseded") or []
    newest = tier.get("newest") or 0
    measured = f"{len(copies)}/{asked} copied" + (f", {len(skipped)} superseded" if skipped else "")
    why = _trouble(tier, waited_s)
    if why:
        return report.failed(
            "checkpoint_tier", f"{tier['url']}: {why}", measured=measured,
            expected=f"step {newest} copied", op="==",
        )  # fmt: skip
    if not copies:
        return report.not_run("checkpoint_tier", "no checkpoint written in this run")
    detail = (
        f"{tier['url']}: {sum(c['bytes'] for c in copies) / 1e6:,.1f} MB at"
        f" {_gbps(copies):.3f} GB/s, lag up to {max(c['lag_s'] for c in copies):.1f} s; the"
        f" newest (step {newest}) copied"
    )
    return report.Check(
        "checkpoint_tier", report.PASS, measured, f"step {newest} copied", "", "==", detail
    )


def nodes_tier_check(nodes: dict[str, dict], waited_s: float) -> report.Check:
    """Every node's own copy is complete on the tier (the smoke job: each node copies the
    checkpoint its round trip wrote). Fails naming every node whose copy failed or did not
    finish; not run where some node wrote nothing to copy (its round trip failed, and says so)
    and none failed; a pass gives the slowest node's GB/s and the largest lag."""
    expected = f"{len(nodes)}/{len(nodes)} nodes copied"
    done = {h: t for h, t in nodes.items() if t["copies"] and not _trouble(t, waited_s)}
    measured = f"{len(done)}/{len(nodes)} nodes copied"
    bad = {h: why for h, t in sorted(nodes.items()) if (why := _trouble(t, waited_s))}
    if bad:
        detail = "; ".join(f"{h}: {nodes[h]['url']}: {why}" for h, why in bad.items())
        return report.failed(
            "checkpoint_tier", detail, measured=measured, expected=expected, op="=="
        )
    nothing = sorted(h for h in nodes if h not in done)
    if not nodes or nothing:
        return report.not_run(
            "checkpoint_tier",
            f"no checkpoint to copy on {', '.join(nothing) or 'any node'} (the round trip wrote"
            " none)",
            measured=measured,
            expected=expected,
        )
    slow = min(done, key=lambda h: _gbps(done[h]["copies"]))
    lag = max(c["lag_s"] for t in done.values() for c in t["copies"])
    size = max(sum(c["bytes"] for c in t["copies"]) for t in done.values())
    where = f" (slowest node {slow})" if len(done) > 1 else f" ({slow})"
    detail = (
        f"{nodes[slow]['url']}: {size / 1e6:,.1f} MB per node, {_gbps(done[slow]['copies']):.3f}"
        f" GB/s{where}, lag up to {lag:.1f} s"
    )
    return report.Check("checkpoint_tier", report.PASS, measured, expected, "", "==", detail)
