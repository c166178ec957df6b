"""`rackform up`'s wait for the nodes configured at boot (rackform/boot/waiting.py), called as
`up` calls it after the stack's update, on a bare-metal plan whose groups configure at boot:
the target's runtime runs the real boot server on loopback, and "nodes" post real HTTP reports
to it with what the operator is shown (the URL, each group's artifact, the round's token).

The nodes try to fool it: a report from a node the blueprint does not list, one for another
artifact, a garbled one, one whose checks failed, hyphenated and dotted names, and a node that
never reports. (Which groups configure at boot is the compiler's; here the plan is given boot
groups directly, as a baked image will make them.)"""

from __future__ import annotations

import dataclasses
import json
import threading
import urllib.error
import urllib.request

import pytest
from boothelp import settings_in
from planhelp import BARE_METAL, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.boot.controller import BootError
from rackform.boot.node import log as node_log
from rackform.boot.node import report as node_report
from rackform.boot.reports import (
    FAILED,
    MISSING,
    PASSED,
    STALE,
    Judged,
    NodeResult,
    recorded_value,
)
from rackform.boot.waiting import BootWait, boot_groups, check_before_up, wait_for_boot
from rackform.engine import compile_effective
from rackform.evidence.boot_record import BOOT_CHECK, recorded_check
from rackform.targets.runtimes import runtime

PASSING = [{"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8}]
FAILING = [{"name": "gpu_count", "status": "fail", "measured": 7, "expected": 8}]

FIVE = variant(
    BARE_METAL,
    **{
        "node_groups": [
            {
                **BARE_METAL["node_groups"][0],
                "hosts": [
                    {"name": "hgx-01.r1", "address": "10.0.0.1"},
                    {"name": "hgx-02.r1", "address": "10.0.0.2"},
                ],
            },
            {
                "name": "l40s-b",
                "gpu": "L40S",
                "gpus_per_node": 4,
                "hosts": [
                    {"name": "l40s-b-01", "address": "10.0.1.1"},
                    {"name": "l40s-b-02", "address": "10.0.1.2"},
                    {"name": "l40s-b-03", "address": "10.0.1.3"},
                ],
            },
        ]
    },
)


@pytest.fixture(autouse=True)
def _log(tmp_path, monkeypatch):
    monkeypatch.setattr(node_log, "LOG", tmp_path / "bootstrap.log")


def _at_boot(plan):
    groups = tuple(dataclasses.replace(g, configured="boot") for g in plan.node_groups)
    return dataclasses.replace(plan, node_groups=groups)


def _plan(tmp_path, doc=FIVE):
    return _at_boot(compile_effective(load_effective(write_blueprint(tmp_path, doc))))


class Site:
    """The nodes, booting once the operator has been told where the server is: each posts what
    `plan` says it does, from what `up` printed."""

    def __init__(self, out, cluster, plan):
        self.out, self.lines, self.statuses = out, [], {}
        self.plan = plan
        # Each node's group; a machine the blueprint does not list runs the first's artifact.
        self.group = {h.name: g.name for g in cluster.node_groups for h in g.hosts}
        self.first = cluster.node_groups[0].name
        self.threads: list[threading.Thread] = []

    def say(self, line: str) -> None:
        self.lines.append(line)
        if line.startswith("waiting up to"):  # the last line once the server listens
            self.boot()

    def told(self) -> tuple[str, dict[str, str]]:
        url = next(ln.removeprefix("listening on ") for ln in self.lines if "listening" in ln)
        shas = {
            ln.split(":")[0].removeprefix("node group "): ln.rsplit(" ", 1)[1]
            for ln in self.lines
            if ln.startswith("node group ")
        }
        return url, shas

    def boot(self) -> None:
        url, shas = self.told()
        for node, how in self.plan.items():
            # Each node's own token, from its user data (a machine without any makes one up).
            data = self.out / "user-data" / node
            token = settings_in(data.read_text())["token"] if data.exists() else "0" * 64
            t = threading.Thread(target=self.post, args=(url, token, node, how, shas))
            t.start()
            self.threads.append(t)

    def post(self, url, token, node, how, shas) -> None:
        group = self.group.get(node, self.first)
        report = {"node": node, "artifact": shas[group], "outcome": "configured", "error": ""}
        report["checks"] = PASSING
        if how == "failed":
            report |= {"outcome": "failed", "error": "serving checks failed: gpu_count"}
            report["checks"] = FAILING
        elif how == "checks-fail":
            report["checks"] = FAILING  # says configured, but its checks do not pass
        elif how == "other-artifact":
            report["artifact"] = "f" * 64
        body = b'{"node": "' + node.encode() + b'", "artif' if how == "garbled" else None
        if body is None:
            body = json.dumps(report).encode()
        auth = node_report.authorization(node, token, "POST", f"/report/{node}", body)
        req = urllib.request.Request(
            f"{url}/report/{node}", data=body, headers={"Authorization": auth}, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as answer:
                self.statuses[node] = answer.status
        except urllib.error.HTTPError as exc:
            self.statuses[node] = exc.code

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=10)


def test_up_names_each_listed_node_that_did_not_pass_and_ignores_the_unlisted(tmp_path):
    plan = _plan(tmp_path)
    out = tmp_path / "round"
    site = Site(
        out,
        plan,
        {
            "hgx-01.r1": "passes",
            "hgx-02.r1": "checks-fail",
            "l40s-b-01": "other-artifact",
            "l40s-b-02": "garbled",
            # l40s-b-03 never boots; a machine the blueprint does not list reports as if a node.
            "intruder-01": "passes",
        },
    )
    how = BootWait(1.5, bind="127.0.0.1", out=out, poll_s=0.1, say=site.say)
    judged = wait_for_boot(plan, how, runtime(plan.target_type))
    site.join()
    assert site.statuses == {
        "hgx-01.r1": 200,
        "hgx-02.r1": 200,
        "l40s-b-01": 200,
        "l40s-b-02": 400,  # not a report: refused, nothing written
        "intruder-01": 403,  # not a node of this round: no credential of it
    }
    assert judged.names(PASSED) == ["hgx-01.r1"]
    assert judged.names(FAILED) == ["hgx-02.r1"]
    assert judged.names(STALE) == ["l40s-b-01"]
    assert judged.names(MISSING) == ["l40s-b-02", "l40s-b-03"]
    assert "intruder-01" not in {r.node for r in judged.nodes}
    assert not judged.validated and judged.waited_s >= 1.5
    lines = judged.lines()
    assert len(lines) == 4 and lines[0].startswith("hgx-02.r1: failed: gpu_count")
    assert lines[1].startswith("l40s-b-01: WARNING: ran artifact ffffffffffff")
    assert lines[2].startswith("l40s-b-02: no report after 2 s") and "run `rackform up`" in lines[2]
    check = judged.check()
    assert check == {
        "name": BOOT_CHECK,
        "status": "fail",
        "measured": 1,
        "expected": 5,
        "unit": "nodes",
        "detail": "hgx-02.r1 failed, l40s-b-01 stale, l40s-b-02 missing, l40s-b-03 missing",
    }
    # What the operator saw: where the server listened, each group's artifact, the user data.
    assert site.lines[0].startswith("listening on http://127.0.0.1:")
    assert sorted((out / "user-data").iterdir()) == [
        out / "user-data" / n
        for n in ("hgx-01.r1", "hgx-02.r1", "l40s-b-01", "l40s-b-02", "l40s-b-03")
    ]


def test_every_node_passing_ends_the_wait_before_the_deadline(tmp_path):
    plan = _plan(tmp_path)
    out = tmp_path / "round"
    nodes = ("hgx-01.r1", "hgx-02.r1", "l40s-b-01", "l40s-b-02", "l40s-b-03")
    site = Site(out, plan, dict.fromkeys(nodes, "passes"))
    judged = wait_for_boot(
        plan,
        BootWait(60, bind="127.0.0.1", out=out, poll_s=0.05, say=site.say),
        runtime(plan.target_type),
    )
    site.join()
    assert judged.validated and judged.waited_s < 30
    assert judged.check()["status"] == "pass" and judged.check()["measured"] == 5


def test_a_node_that_says_it_failed_is_failed_with_its_reason(tmp_path):
    plan = _plan(tmp_path, BARE_METAL)
    out = tmp_path / "round"
    site = Site(out, plan, {"n1": "failed", "n2": "passes"})
    judged = wait_for_boot(
        plan,
        BootWait(30, bind="127.0.0.1", out=out, poll_s=0.05, say=site.say),
        runtime(plan.target_type),
    )
    site.join()
    assert judged.names(FAILED) == ["n1"] and judged.names(PASSED) == ["n2"]
    assert "serving checks failed: gpu_count" in judged.lines()[0]


def test_deadline_0_and_a_plan_without_boot_groups_wait_for_nothing(tmp_path):
    plan = _plan(tmp_path)
    out = tmp_path / "round"
    assert (
        wait_for_boot(plan, BootWait(0, bind="127.0.0.1", out=out), runtime(plan.target_type))
        is None
    )
    assert not out.exists()  # no round: no token, no user data, no server
    pushed = compile_effective(load_effective(write_blueprint(tmp_path, FIVE)))
    assert boot_groups(pushed) == []
    assert (
        wait_for_boot(pushed, BootWait(60, bind="127.0.0.1", out=out), runtime(pushed.target_type))
        is None
    )
    check_before_up(
        pushed, BootWait(60), runtime(pushed.target_type)
    )  # nothing to serve: nothing to say where


def test_before_up_a_listed_boot_group_needs_where_to_serve(tmp_path):
    plan = _plan(tmp_path)
    with pytest.raises(BootError, match=r"hgx, l40s-b configure at boot.*--boot-bind"):
        check_before_up(plan, BootWait(60), runtime(plan.target_type))
    with pytest.raises(BootError, match="--url"):
        check_before_up(plan, BootWait(60, bind="0.0.0.0"), runtime(plan.target_type))
    check_before_up(
        plan, BootWait(60, bind="0.0.0.0", url="http://10.0.0.254:8080"), runtime(plan.target_type)
    )
    check_before_up(plan, BootWait(0), runtime(plan.target_type))  # not waiting: nothing to serve


def test_the_record_is_the_same_for_the_same_outcome_and_never_passes_when_garbled():
    def judged(waited, state=MISSING):
        nodes = (NodeResult("a-1", PASSED, ""), NodeResult("b-2", state, f"b-2: {waited}"))
        return Judged("0" * 64, nodes, waited)

    assert recorded_value(judged(12.0)) == recorded_value(judged(1800.0))
    assert recorded_value(judged(12.0)) != recorded_value(judged(12.0, FAILED))
    assert recorded_check(recorded_value(judged(3.0))) == judged(3.0).check()
    assert recorded_check("") is None and recorded_check(None) is None
    for garbled in ("{", "[]", '{"name": "boot_reports", "status": "passed"}', '"pass"'):
        check = recorded_check(garbled)
        assert check["name"] == BOOT_CHECK and check["status"] == "fail"
    nobody = Judged("0" * 64, ())
    assert nobody.check()["status"] == "not-run" and nobody.check()["detail"]
