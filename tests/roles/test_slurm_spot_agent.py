"""The slurm role's spot interruption agent (roles/slurm/files/rackform_spot_agent.py), run as
the service runs it, against a real HTTP server on loopback that answers as EC2's metadata
service does (tests/fake_imds.py: an IMDSv2 token, then 404 until there is a notice, then the
notice in AWS's documented form). Slurm's commands are not installed on this machine: recording
stand-ins for scontrol, squeue and scancel go first on PATH (the e2e, tests/e2e/test_slurm_vms.py,
runs the agent against the real ones on the testbed's cluster)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fake_imds import handler
from gpu_collection import ROLES_DIR
from loopback import http_server

AGENT = ROLES_DIR / "slurm" / "files" / "rackform_spot_agent.py"
# AWS's example of the item ("Spot Instance interruption notices").
DOCUMENTED = {"action": "terminate", "time": "2017-09-18T08:22:00Z"}

spec = importlib.util.spec_from_file_location("rackform_spot_agent", AGENT)
agent = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agent)


@pytest.fixture
def slurm_bin(tmp_path) -> tuple[Path, Path]:
    """scontrol, squeue and scancel that log their arguments; squeue says jobs 41 and 42 run
    on the node."""
    bindir, log = tmp_path / "bin", tmp_path / "slurm.log"
    bindir.mkdir()
    for name, out in (("scontrol", ""), ("squeue", "41\n42\n"), ("scancel", "")):
        (bindir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nprintf "{out}"\n')
        (bindir / name).chmod(0o755)
    return bindir, log


def start(port: int, bindir: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.Popen(
        [sys.executable, str(AGENT), "--node", "node2", "--imds", f"http://127.0.0.1:{port}",
         "--interval-s", "0.1", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def wait_for(cond, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_notice_drains_the_node_signals_its_jobs_then_requeues_them(tmp_path, slurm_bin):
    bindir, log = slurm_bin
    notice, requests = tmp_path / "notice.json", []
    with http_server(handler(str(notice), requests)) as port:
        proc = start(port, bindir, "--requeue-after-s", "1")
        try:
            # No notice yet: the agent asks (with its token) and does nothing.
            wait_for(lambda: requests.count(f"GET {agent.NOTICE_PATH} 404") >= 3, "no polls")
            assert not log.exists()
            notice.write_text(json.dumps(DOCUMENTED))
            wait_for(lambda: log.exists() and "requeue 42" in log.read_text(), "no requeue")
            time.sleep(0.5)  # the same notice, seen again, is not acted on twice
        finally:
            proc.terminate()
            out = proc.communicate(timeout=10)[0]
    assert log.read_text().splitlines() == [
        "scontrol update nodename=node2 state=drain"
        " reason=spot interruption notice: terminate at 2017-09-18T08:22:00Z",
        "squeue --noheader --nodelist=node2 --states=RUNNING --format=%A",
        "scancel --signal=USR1 41",
        "scancel --signal=USR1 42",
        "scontrol requeue 41",
        "scontrol requeue 42",
    ], out
    # One token for the whole run (IMDSv2: PUT, then every GET carries it).
    assert requests[0] == f"PUT {agent.TOKEN_PATH} 200"
    assert requests.count(f"PUT {agent.TOKEN_PATH} 200") == 1
    assert f"GET {agent.NOTICE_PATH} 401" not in requests
    assert "asked jobs 41, 42 to checkpoint (SIGUSR1)" in out and "requeued jobs 41, 42" in out


def test_the_requeue_waits_for_the_checkpoint_but_never_past_the_notices_time(
    slurm_bin, monkeypatch
):
    monkeypatch.setenv("PATH", f"{slurm_bin[0]}:{os.environ['PATH']}")
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    slept = []

    def notice_in(seconds: int) -> dict:
        at = now + timedelta(seconds=seconds)
        return {"action": "terminate", "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}

    def act(notice):
        return agent.act(notice, "n", 60, 40, sleep=slept.append, now=now.timestamp,
                         log=lambda line: None)  # fmt: skip

    assert act(notice_in(120)) == ["41", "42"]  # two minutes' warning: the whole minute
    assert act(notice_in(70)) == ["41", "42"]  # less: requeued 40 s before the time
    assert act(DOCUMENTED) == ["41", "42"]  # already past: at once
    assert slept == [60, 30, 0]


def test_without_a_token_the_metadata_service_refuses_and_the_agent_renews_it(tmp_path):
    requests = []
    with http_server(handler(str(tmp_path / "none"), requests)) as port:
        imds = agent.Imds(f"http://127.0.0.1:{port}")
        assert imds.notice() is None
        imds._token = "expired"  # as after a stop: the service answers 401, a new one is got
        (tmp_path / "none").write_text(json.dumps(DOCUMENTED))
        assert imds.notice() == DOCUMENTED
    assert requests == [
        f"PUT {agent.TOKEN_PATH} 200", f"GET {agent.NOTICE_PATH} 404",
        f"GET {agent.NOTICE_PATH} 401", f"PUT {agent.TOKEN_PATH} 200",
        f"GET {agent.NOTICE_PATH} 200",
    ]  # fmt: skip


def test_a_redirect_is_never_followed_with_the_token(tmp_path):
    # A metadata service (or anything answering at its address) that redirects: the agent
    # asks nothing of the place it names, so the session token goes nowhere else.
    import http.server

    elsewhere: list[str] = []

    class Second(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            elsewhere.append(self.headers.get("X-aws-ec2-metadata-token", ""))
            self.send_response(404)
            self.end_headers()

        do_PUT = do_GET

        def log_message(self, *args):
            pass

    with http_server(Second) as second:

        class First(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"the-session-token")

            def do_GET(self):
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{second}{self.path}")
                self.end_headers()

            def log_message(self, *args):
                pass

        with http_server(First) as first:
            imds = agent.Imds(f"http://127.0.0.1:{first}")
            with pytest.raises(OSError, match="302"):
                imds.notice()
    assert elsewhere == []
