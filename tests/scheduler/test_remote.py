"""The one seam between the Slurm commands and a host: the ssh command line it builds, and that
what the caller passes arrives as the same words on the other side. No host answers SSH here:
tests/fake_ssh.py stands in for ssh, running the remote command line through `sh -c` as sshd
would, so a quoting mistake shows here as it would on a real host."""

from __future__ import annotations

import os

import fake_ssh
import pytest

from rackform.scheduler.remote import Local, RemoteError, Ssh

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
