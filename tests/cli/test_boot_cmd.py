"""`rackform boot serve`, the real command in a subprocess against a bare-metal blueprint with
listed hosts: the "nodes" are this test posting as them with the real node script's report
function (the hosts' addresses are never reached)."""

from __future__ import annotations

import subprocess
import sys

from blueprint_helpers import ROOT, rackform
from boothelp import self_signed, settings_in
from planhelp import AWS_TRAINING, BARE_METAL, write_blueprint

from rackform.boot.node import log as node_log
from rackform.boot.node import report as node_report

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
    (url,) = [ln.split()[-1] for ln in lines if ln.startswith("listening on http")]
    assert url.startswith(("http://127.0.0.1:", "https://127.0.0.1:"))
    return url, lines


def _report(tmp_path, url, node, sha, monkeypatch) -> bool:
    """Node `node` reports, with what its user data holds (its own token, and the CA bundle
    where the server is https)."""
    monkeypatch.setattr(node_log, "LOG", tmp_path / f"{node}.log")
    to = settings_in((tmp_path / "out" / "user-data" / node).read_text())
    assert to["url"] == url
    report = {"artifact": sha, "outcome": "configured", "error": "", "checks": PASSING}
    return node_report.send_report(to, report, tries=1)


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


def test_over_tls_with_the_sites_certificate_every_node_reports(tmp_path, monkeypatch):
    cert, key = self_signed(tmp_path / "tls")
    tls = ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(cert)]
    with _serve(tmp_path, "--deadline", "10", *tls) as proc:
        url, lines = _until_listening(proc)
        assert url.startswith("https://127.0.0.1:")
        for node in ("n1", "n2"):
            assert _report(tmp_path, url, node, _sha(lines), monkeypatch)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert out.splitlines()[2].startswith("every node passed (2) in ")
    assert (tmp_path / "out" / "key").exists()
    assert (tmp_path / "out" / "key").read_text().strip() not in out + err


def test_tls_options_that_do_not_go_together_are_refused_in_one_line(tmp_path):
    bp = write_blueprint(tmp_path, BARE_METAL)
    cert, _ = self_signed(tmp_path / "tls")
    r = rackform("boot", "serve", bp, "--bind", "127.0.0.1", "--tls-cert", cert)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "needs its certificate and its key, both" in r.stderr
    r = rackform(
        "boot", "serve", bp, "--bind", "0.0.0.0", "--url", "http://10.0.0.9:80",
        "--tls-cert", cert, "--tls-key", cert, "--out", tmp_path / "out",
    )  # fmt: skip
    assert r.returncode == 2 and "https://" in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "out").exists()


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
