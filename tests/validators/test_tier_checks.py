"""The smoke job's checkpoint_tier over every node (validators/tier_checks.py): it fails naming
each node whose copy failed or did not finish, and a pass gives the slowest node's GB/s and the
largest lag. (The failure cases are also in the audit, tests/validators/test_check_evidence.py.)"""

from __future__ import annotations

from validators.report import FAIL, NOT_RUN, PASS
from validators.tier_checks import nodes_tier_check


def node(host: str, seconds: float = 1.0, lag_s: float = 1.5, **over) -> dict:
    copy = {"step": 30, "bytes": 2_000_000_000, "seconds": seconds, "gbps": 2.0 / seconds,
            "lag_s": lag_s}  # fmt: skip
    return {"url": f"/shared/smoke/{host}", "copies": [copy], "errors": [], "superseded": [],
            "newest": 30, "asked": 1, "unfinished": False, "pending": 0, **over}  # fmt: skip


def test_a_pass_gives_the_slowest_nodes_speed_and_the_largest_lag():
    c = nodes_tier_check({"a": node("a", 1.0, 9.5), "b": node("b", 4.0, 4.2), "c": node("c")}, 60)
    assert (c.status, c.measured, c.expected) == (PASS, "3/3 nodes copied", "3/3 nodes copied")
    assert c.detail == (
        "/shared/smoke/b: 2,000.0 MB per node, 0.500 GB/s (slowest node b), lag up to 9.5 s"
    )


def test_every_node_whose_copy_failed_or_did_not_finish_is_named():
    c = nodes_tier_check(
        {
            "a": node("a"),
            "b": node("b", errors=["step 30: OSError: [Errno 30] Read-only file system"]),
            "c": node("c", unfinished=True),
        },
        60,
    )
    assert (c.status, c.measured) == (FAIL, "1/3 nodes copied")
    assert c.detail == (
        "b: /shared/smoke/b: step 30: OSError: [Errno 30] Read-only file system; "
        "c: /shared/smoke/c: copies still running after 60 s"
    )


def test_a_node_with_nothing_to_copy_leaves_the_check_not_run_saying_which():
    c = nodes_tier_check({"a": node("a"), "b": node("b", copies=[], asked=0)}, 60)
    assert c.status == NOT_RUN and "no checkpoint to copy on b" in c.detail
