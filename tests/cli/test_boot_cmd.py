"""`rackform boot serve`, the real command in a subprocess against a bare-metal blueprint with
listed hosts: the "nodes" are this test posting as them with the real node script's report
function (the hosts' addresses are never reached)."""

from __future__ import annotations

import subprocess
import sys

from blueprint_helpers import ROOT, rackform
from planhelp import AWS_TRAINING, BARE_METAL, write_blueprint

from rackform.boot import node as nb

PASSING = [{"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8}]


def _serve(tmp_path, *args):
    bp = write_blueprint(tmp_path, BARE_METAL)
    argv = [sys.executable, "-m", "rackform", "boot", "serve", str(bp), "--bind", "127.0.0.1"]
    argv += ["--out", str(tmp_path / "out"), *args]
    return subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _until_listening(proc) -> tuple[str, list[str]]:
    """The server's URL, and the lines printed until it waits."""
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("waiting up to "):
            break
    (url,) = [ln.split()[-1] for ln in lines if ln.startswith("listening on http://127.0.0.1:")]
    return url, lines


def _report(tmp_path, url, node, sha, monkeypatch) -> bool:
    monkeypatch.setattr(nb, "LOG", tmp_path / f"{node}.log")
    token = (tmp_path / "out" / "token").read_text().strip()
    to = {"url": url, "token": token, "node": node}
    report = {"artifact": sha, "outcome": "configured", "error": "", "checks": PASSING}
    return nb.send_report(to, report, tries=1)


def _sha(lines: list[str]) -> str:
    (line,) = [ln for ln in lines if ln.startswith("node group hgx: artifact ")]
    return line.split()[-1]


def test_a_node_that_never_reports_is_named_missing_and_the_exit_is_not_zero(tmp_path, monkeypatch):
    with _serve(tmp_path, "--deadline", "0.05") as proc:
        url, lines = _until_listening(proc)
        assert _report(tmp_path, url, "n1", _sha(lines), monkeypatch)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, out + err
    assert "user data for 2 nodes in" in "\n".join(lines)
    assert sorted((tmp_path / "out" / "user-data").iterdir()) == [
        tmp_path / "out" / "user-data" / n for n in ("n1", "n2")
    ]
    result = out.splitlines()
    assert result[0] == "n1: passed"
    assert result[1].startswith("n2: no report after 3 s: it did not boot")
    assert result[2] == "1 of 2 nodes passed in 3 s: the cluster is not validated"


def test_every_node_reporting_a_pass_is_validated_before_the_deadline(tmp_path, monkeypatch):
    with _serve(tmp_path, "--deadline", "10") as proc:
        url, lines = _until_listening(proc)
        for node in ("n1", "n2"):
            assert _report(tmp_path, url, node, _sha(lines), monkeypatch)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert out.splitlines()[:2] == ["n1: passed", "n2: passed"]
    assert out.splitlines()[2].startswith("every node passed (2) in ")


def test_a_blueprint_whose_nodes_the_stack_creates_is_refused_in_one_line(tmp_path):
    bp = write_blueprint(tmp_path, AWS_TRAINING)
    r = rackform("boot", "serve", bp, "--bind", "127.0.0.1", "--out", tmp_path / "out")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("rackform: target aws does not list its nodes")
    assert not (tmp_path / "out").exists()


def test_a_wildcard_bind_needs_the_url_the_nodes_use(tmp_path):
    bp = write_blueprint(tmp_path, BARE_METAL)
    r = rackform("boot", "serve", bp, "--bind", "0.0.0.0", "--out", tmp_path / "out")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "say with --url where the nodes reach it" in r.stderr
    assert not (tmp_path / "out").exists()
