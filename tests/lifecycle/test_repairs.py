"""Time to repair and between failures from a stack's audit log, written by the writers heal and
rolling changes use (`Store.audit`), against figures computed by hand; the log as users' logs
are: hyphenated names, lines out of order, a node never returned, hand-edited and cut lines."""

from __future__ import annotations

import json
import random

import pytest

from rackform.lifecycle.record import Store
from rackform.lifecycle.repairs import from_log

T0 = 1_800_000_000.0
STACK = "dc-a-prod"  # hyphens in the stack and node names: nothing is split on them


def history(store: Store) -> None:
    """The example every figure below is computed from (seconds after T0)."""
    a = store.audit
    a("heal", kind="heal", nodes={"gpu-a-01": "reboot", "gpu-a-02": "reset"}, ts=T0)
    a("batch", kind="heal", batch=1, nodes=["gpu-a-01"], status="drained", why="", ts=T0 + 100)
    a("batch", kind="heal", batch=1, nodes=["gpu-a-01"], status="done", why="", ts=T0 + 600)
    a("batch", kind="heal", batch=2, nodes=["gpu-a-02"], status="done", why="", ts=T0 + 900)
    a("ticket", kind="heal", node="gpu-b-07", action="drain", why="md0 degraded", ts=T0 + 3600)
    pair = ["gpu-a-01", "gpu-a-02"]
    a("batch", kind="rollout", batch=1, nodes=pair, status="drained", why="", ts=T0 + 7200)
    a("batch", kind="rollout", batch=1, nodes=pair, status="failed", why="nccl", ts=T0 + 7500)
    a("batch", kind="rollout", batch=1, nodes=pair, status="drained", why="", ts=T0 + 8000)
    a("batch", kind="rollout", batch=1, nodes=pair, status="done", why="", ts=T0 + 8300)
    a("heal", kind="heal", nodes={"gpu-a-01": "reboot"}, ts=T0 + 86400)
    a("batch", kind="heal", batch=1, nodes=["gpu-a-01"], status="done", why="", ts=T0 + 87600)


def check(r) -> None:
    # Failures: a-01 at 0 (600 s), a-02 at 0 (900), b-07 at 3600 (open: a person's ticket),
    # a-01 and a-02 failing the rollout's re-validation at 7500 (800 each, returned at 8300),
    # a-01 at 86400 (1200).
    assert [(f.node, f.detected - T0, f.seconds) for f in r.failures] == [
        ("gpu-a-01", 0, 600), ("gpu-a-02", 0, 900), ("gpu-b-07", 3600, None),
        ("gpu-a-01", 7500, 800), ("gpu-a-02", 7500, 800), ("gpu-a-01", 86400, 1200),
    ]  # fmt: skip
    assert [f.node for f in r.open] == ["gpu-b-07"]
    assert r.mttr_s == pytest.approx((600 + 900 + 800 + 800 + 1200) / 5)  # 860
    assert r.tbf_s == pytest.approx(86400 / 5)  # 6 detections over 86,400 s: 5 gaps
    assert r.per_day() == pytest.approx(6 / (87600 / 86400))  # the log spans 87,600 s
    assert r.per_day(now=T0 + 2 * 86400) == pytest.approx(3.0)
    assert r.maintenance_seconds == 2 * 1100  # each node drained 7200 -> returned 8300
    nodes = {n.node: (n.failures, n.repaired, n.mttr_s) for n in r.nodes()}
    assert nodes["gpu-a-01"] == (3, 3, pytest.approx((600 + 800 + 1200) / 3))
    assert nodes["gpu-a-02"] == (2, 2, pytest.approx(850))
    assert nodes["gpu-b-07"] == (1, 0, None)


def test_the_figures_from_the_writers_entries(tmp_path):
    store = Store(tmp_path, STACK, kind="heal")
    history(store)
    r, problems = from_log(store.log.path, STACK)
    assert problems == []
    check(r)


def test_lines_out_of_order_give_the_same_figures(tmp_path):
    store = Store(tmp_path, STACK, kind="heal")
    history(store)
    lines = store.log.path.read_text().splitlines(keepends=True)
    random.Random(7).shuffle(lines)
    store.log.path.write_text("".join(lines))
    r, problems = from_log(store.log.path, STACK)
    assert problems == []
    check(r)


def test_edited_and_cut_lines_are_named_and_skipped_never_counted(tmp_path):
    store = Store(tmp_path, STACK, kind="heal")
    history(store)
    path = store.log.path
    good = path.read_text()
    bad = [
        '{"event": "heal", "kind": "heal", "nodes": {"gpu-z-09": "reboot"}, "ts": "yesterday"',
        json.dumps({"event": "heal", "nodes": ["gpu-z-09"], "stack": STACK, "ts": T0 + 5}),
        json.dumps({"event": "ticket", "stack": STACK, "ts": T0 + 6}),
        json.dumps({"event": "heal", "nodes": {"gpu-z-09": "reboot"}, "stack": STACK}),
        "[1, 2]",
        json.dumps(
            {
                "event": "batch",
                "kind": "heal",
                "nodes": "gpu-a-01",
                "status": "done",
                "stack": STACK,
                "ts": T0 + 10,
            }
        ),
        '{"event": "batch", "kind": "heal", "nodes": ["gpu-a-0',  # a kill cut it
        f'{{"event": "heal", "nodes": {{"gpu-z-09": "reboot"}}, "stack": "{STACK}", "ts": Infinity}}',
    ]
    path.write_text(good + "\n".join(bad) + "\n")
    n = good.count("\n")
    r, problems = from_log(path, STACK)
    assert [(p.where, p.why) for p in problems] == [
        (f"{path}:{n + 1}", "not a JSON entry (cut short or edited): skipped"),
        (f"{path}:{n + 5}", "not a JSON object: skipped"),
        (f"{path}:{n + 7}", "not a JSON entry (cut short or edited): skipped"),
        (f"{path}:{n + 4}", "an entry without a time (`ts`): skipped"),
        (f"{path}:{n + 8}", "an entry without a time (`ts`): skipped"),
        (f"{path}:{n + 2}", "a heal entry whose `nodes` is not node -> action: skipped"),
        (f"{path}:{n + 3}", "a ticket entry without its `node`: skipped"),
        (f"{path}:{n + 6}", "a batch entry without its `nodes` and `status`: skipped"),
    ]
    check(r)  # the figures are the good lines' alone


def test_a_node_detected_again_while_open_was_returned_unrecorded(tmp_path):
    store = Store(tmp_path, STACK, kind="heal")
    store.audit("ticket", kind="heal", node="gpu-b-07", action="drain", why="ib down", ts=T0)
    # A person fixed and resumed it (no entry); heal finds it failing again a day later.
    store.audit("heal", kind="heal", nodes={"gpu-b-07": "reboot"}, ts=T0 + 86400)
    store.audit("batch", kind="heal", batch=1, nodes=["gpu-b-07"], status="failed", why="x",
                ts=T0 + 86500)  # fmt: skip
    r, _ = from_log(store.log.path, STACK)
    first, second = r.failures
    assert first.unknown_end and not first.open and first.seconds is None
    assert second.open  # its remediation failed: drained for a person, not returned
    assert r.mttr_s is None and r.tbf_s == 86400
    assert r.per_day() == pytest.approx(2 / (86500 / 86400))


def test_an_empty_or_missing_log_has_no_figures(tmp_path):
    r, problems = from_log(tmp_path / "none.log", STACK)
    assert (r.failures, r.mttr_s, r.tbf_s, r.per_day(), problems) == ([], None, None, None, [])
    other = Store(tmp_path, "dc-b-prod")  # another stack's entries in a log are not this one's
    other.audit("heal", kind="heal", nodes={"n1": "reboot"}, ts=T0)
    r, _ = from_log(other.log.path, STACK)
    assert r.failures == []
