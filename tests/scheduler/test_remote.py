"""The one seam between the Slurm commands and a host: the ssh command line it builds, and that
what the caller passes arrives as the same words on the other side. No host answers SSH here:
tests/fake_ssh.py stands in for ssh, running the remote command line through `sh -c` as sshd
would, so a quoting mistake shows here as it would on a real host."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import fake_ssh
import pytest
from slurm_local import blueprint

from rackform.engine import prepare
from rackform.lifecycle.drain import drain
from rackform.scheduler.remote import Local, RemoteError, Ssh, controller
from rackform.targets.onprem.hosts import probe

ECHO_ARGS = 'for a in "$@"; do printf "<%s>\\n" "$a"; done\n'
NASTY = ["rackform reap: llm-a/prod idle", "it's", "$(touch /tmp/pwned)", "a;b", "*", ""]


@pytest.fixture
def ssh_on_path(tmp_path, monkeypatch):
    for key, value in fake_ssh.environ(tmp_path, dict(os.environ)).items():
        monkeypatch.setenv(key, value)
    return tmp_path / "ssh.log"


def test_the_ssh_argv_never_prompts_and_quotes_each_argument_once():
    argv = Ssh("ops", "10.60.0.11", 2222).argv(["a b", "c"])
    assert argv == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-p", "2222",
        "-l", "ops", "--", "10.60.0.11", "sh", "-s", "--", "'a b'", "c",
    ]  # fmt: skip


def test_the_key_and_known_hosts_a_command_was_given_go_to_ssh(ssh_on_path):
    """--private-key and --known-hosts reach the controller's SSH as they reach Ansible's."""
    ssh = Ssh("ops", "10.60.0.11", 22, "/keys/ops key", "/keys/known hosts")
    argv = ssh.argv()
    assert argv[argv.index("-i") + 1] == "/keys/ops key" and "IdentitiesOnly=yes" in argv
    assert 'UserKnownHostsFile="/keys/known hosts"' in argv
    assert ssh("exit 0").rc == 0  # the options take their values: the host still parses


def test_arguments_arrive_as_the_words_they_were(ssh_on_path):
    done = Ssh("root", "10.77.7.1", 22)(ECHO_ARGS, NASTY)
    assert done.rc == 0, done.stderr
    assert done.stdout.splitlines() == [f"<{a}>" for a in NASTY]
    assert not os.path.exists("/tmp/pwned")
    [call] = fake_ssh.calls(ssh_on_path)
    assert (call.user, call.host, call.port) == ("root", "10.77.7.1", "22")


def test_an_unreachable_host_is_a_remote_error_with_ssh_s_reason(ssh_on_path, monkeypatch):
    monkeypatch.setenv("FAKE_SSH_FAIL", "1")
    with pytest.raises(RemoteError, match=r"root@10\.77\.7\.1:22 is not reachable over SSH: .*"
                       "Connection refused"):  # fmt: skip
        Ssh("root", "10.77.7.1")("true")


def test_a_failing_script_is_an_answer_not_a_remote_error(ssh_on_path):
    done = Ssh("root", "10.77.7.1")("echo nope >&2; exit 3")
    assert (done.rc, done.why()) == (3, "nope")


def test_no_ssh_client_is_a_remote_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RemoteError, match="no `ssh` client on PATH"):
        Ssh("root", "10.77.7.1")("true")


def test_a_script_past_its_time_is_a_remote_error():
    with pytest.raises(RemoteError, match=r"did not finish in 0\.2 s"):
        Local()("sleep 5", (), timeout=0.2)


def test_local_runs_with_its_own_environment():
    done = Local({"PATH": os.environ["PATH"], "SLURM_CONF": "/x/slurm.conf"})(
        'echo "$SLURM_CONF $1"', ["two words"]
    )
    assert done.stdout == "/x/slurm.conf two words\n"


def _hostile_plan(tmp_path, user: str, address: str):
    """A compiled plan of a valid blueprint, edited past the schema: its ssh user, and the
    address of its Slurm controller (the first host), what a blueprint could not give."""
    f = tmp_path / "slurm-a.yaml"
    f.write_text(blueprint())
    plan = prepare(f).plan
    g = plan.node_groups[0]
    ctl = replace(g.hosts[0], address=address)
    return replace(plan, ssh_user=user, node_groups=(replace(g, hosts=(ctl, *g.hosts[1:])),))


def test_a_user_or_host_that_looks_like_an_option_is_never_read_as_one(ssh_on_path, monkeypatch):
    """The runner `rackform jobs`, reap's drain, heal and rolling changes use, fed values the
    schema refuses (a plan edited after compile): the user goes after -l, the host after --, so
    ssh (the fake reads its command line as OpenSSH does, and runs a ProxyCommand it is given)
    runs no ProxyCommand and nothing named in them."""
    monkeypatch.setenv("FAKE_SSH_RUN_PROXY", "1")
    tmp = ssh_on_path.parent
    user = f"-oProxyCommand=touch {tmp / 'by-user'} #"
    address = f"-oProxyCommand=touch {tmp / 'by-host'}"
    plan = _hostile_plan(tmp, user, address)
    done = controller(plan)(ECHO_ARGS, ["x"])
    assert not (tmp / "by-user").exists() and not (tmp / "by-host").exists()
    assert (done.rc, done.stdout) == (0, "<x>\n"), done.stderr
    [call] = fake_ssh.calls(ssh_on_path)
    assert (call.user, call.host, call.config("ProxyCommand")) == (user, address, None)
    argv = json.loads(ssh_on_path.read_text())
    assert argv[argv.index("-l") + 1] == user and argv[argv.index("--") + 1] == address


def test_the_host_probe_puts_user_and_host_where_ssh_reads_no_option(ssh_on_path, monkeypatch):
    """`up`'s host probe (the bare-metal Host resource), with inputs the schema refuses."""
    monkeypatch.setenv("FAKE_SSH_RUN_PROXY", "1")
    marker = ssh_on_path.parent / "pwned"
    probe(f"-oProxyCommand=touch {marker} #", f"-oProxyCommand=touch {marker}", 22)
    assert not marker.exists()
    [call] = fake_ssh.calls(ssh_on_path)
    assert call.config("ProxyCommand") is None and call.remote == ["sh", "-s"]


def test_slurm_names_given_back_to_the_controller_arrive_inert(ssh_on_path, monkeypatch):
    """Node names that reach the controller's scripts (the drain's; on AWS heal takes them from
    Prometheus's labels, which signals.read checks too) and the reason (evidence read from
    Prometheus) are arguments, never code or options, on either side of ssh. (A job id Slurm
    gives back to requeue is checked by the queue's parser: tests/scheduler/test_queue_parse.py.)"""
    monkeypatch.setenv("FAKE_SSH_RUN_PROXY", "1")
    tmp = ssh_on_path.parent
    marker, log = tmp / "pwned", tmp / "scontrol.log"
    # Slurm's tools on the "controller" (this machine, through the fake ssh): every node idle,
    # and scontrol recording the words it was given, one a line.
    (tmp / "bin" / "sinfo").write_text("#!/bin/sh\necho idle\n")
    (tmp / "bin" / "scontrol").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> {log}\n")
    for tool in ("sinfo", "scontrol"):
        (tmp / "bin" / tool).chmod(0o755)
    hostile = [f"-oProxyCommand=touch {marker}", f"node1;touch {marker}", f"$(touch {marker})"]
    reason = f"rackform heal: `touch {marker}`"
    out = drain(Ssh("root", "10.77.7.1", 22), hostile, reason)
    assert [o.subject for o in out] == hostile and not any(o.ok for o in out)
    assert not marker.exists()
    words = [f"{w}\n" for n in hostile for w in ("update", f"nodename={n}", "state=drain",
                                                   f"reason={reason}")]  # fmt: skip
    assert log.read_text() == "".join(words)
