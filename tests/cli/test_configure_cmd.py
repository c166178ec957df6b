"""`rackform configure` as a user runs it: mistakes exit 2 with one line each and nothing run;
a host Ansible cannot reach exits non-zero naming it. The converge of real hosts is in
tests/e2e/test_configure_vms.py."""

from __future__ import annotations

from blueprint_helpers import AWS_TRAINING, BARE_METAL, rackform
from loopback import free_port


def test_a_missing_blueprint_is_a_user_mistake(tmp_path):
    proc = rackform("configure", tmp_path / "nope.yaml")
    assert proc.returncode == 2
    assert "nope.yaml: no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_roles_and_missing_key_files_are_each_named(write, tmp_path):
    bp = write(BARE_METAL)
    proc = rackform("configure", bp, "--role", "nvme_raid", "--role", "gpu_burn",
                    "--private-key", tmp_path / "no-key")  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert any("--role gpu_burn: no such role" in line for line in lines)
    assert any(f"--private-key {tmp_path / 'no-key'}: no such file" in line for line in lines)
    assert "configure bm-cluster" not in proc.stdout  # nothing ran


def test_extra_vars_must_be_key_value(write):
    proc = rackform("configure", write(BARE_METAL), "-x", "not a pair")
    assert proc.returncode == 2 and "is not KEY=VALUE" in proc.stderr


def test_aws_nodes_are_configured_through_pulumi(write):
    proc = rackform("configure", write(AWS_TRAINING))
    assert proc.returncode == 2
    assert "aws nodes come from the stack's outputs" in proc.stderr


def test_an_unreachable_host_fails_the_run_naming_the_host(write, tmp_path):
    bp = write(
        f"""
        name: lab
        purpose: training
        owner: team@example.com
        target: {{type: bare_metal, ssh_user: root}}
        node_groups:
          - name: cpu
            hosts:
              - {{name: lab1, address: 127.0.0.1, port: {free_port()}}}
        network: {{fabric: ethernet}}
        """
    )
    proc = rackform("configure", bp, "--role", "nccl_rdma", "--report-dir", tmp_path / "r",
                    "--artifacts", tmp_path / "events", "--retries", "1",
                    "--retry-wait", "0.5")  # fmt: skip
    assert proc.returncode == 4  # ansible-playbook's status for unreachable hosts, passed through
    assert (
        "1 node(s) unreachable (lab1): trying them again in 0.5 s, limited to them (retry 1 of 1)"
        in proc.stdout
    )
    assert "retry 1 of 1: none came back; still unreachable: lab1" in proc.stdout
    errors = proc.stderr.splitlines()
    assert "rackform configure: 1 node(s) unreachable after 1 retry:" in errors
    assert any(
        line.startswith("rackform configure: lab1: UNREACHABLE at Learn the host's OS and network:")
        for line in errors
    ), proc.stderr
    assert "lab1" in proc.stdout and "UNREACHABLE" in proc.stdout
    assert f"event log kept in {tmp_path / 'events'}" in proc.stderr


def test_the_scale_options_are_checked_before_anything_runs(write):
    bp = write(BARE_METAL)
    for args, wanted in (
        (["--max-fail-percent", "101"], "--max-fail-percent"),
        (["--batch", "0"], "--batch"),
        (["--retries", "-1"], "--retries"),
        (["--rolling", "--batch", "4"], "no --limit, --role, --check or --batch"),
    ):
        proc = rackform("configure", bp, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert wanted in proc.stderr and "Traceback" not in proc.stderr
        assert "configure bm-cluster" not in proc.stdout  # nothing ran
