"""End to end: a node that configures itself, as an inference cluster's joining node does (the
nodes an autoscaling group adds after `up`). A fresh testbed VM (its own, never converged) runs
the rendered user data as cloud-init runs a user-data script: once, as root, detached from any
login, with a bare environment. The script installs the stack's host key and the controller's
key, fetches the bootstrap artifact from a loopback server (S3 behind the VPC endpoint on AWS),
checks its sha256, makes its virtualenv with ansible-core, runs the roles on the node itself
and then the serving checks, as such a node does.

What this scenario is about is that mechanism, not the roles' installs: the VM boots from the
testbed's baked image (the roles' Debian packages installed when the image was built, natively),
and a serving node gets no torch (the site playbook leaves smoke_train out of an inference
cluster). That every role installs what it needs on a bare host is shown once, by the configure
scenario's converge (tests/e2e/test_configure_vms.py).

Then, from the controller: the node answers SSH with the stack's host key only (an empty
known_hosts is refused: no trust on first use), its status file says configured, the array is
mounted and the NCCL config written; the Configure resource's `read` (what `pulumi refresh`
calls), after an edit of /etc/nccl.conf, names that node and task and nothing else.

Its VM runs in the background from the testbed's start, beside the configure e2e's first
converge (tests/e2e/joiner.py); this test runs last and judges what it found.

Not run here (no AWS): the S3 fetch itself, tagging the instance and completing the lifecycle
hook (the artifact carries no `aws` section in this test; see the README's AWS list).
"""

from __future__ import annotations

import pytest
from joiner import StrictSsh, log_steps

pytestmark = pytest.mark.slow


def test_a_fresh_node_configures_itself_from_its_user_data(joiner, phases):
    with phases(
        "bootstrap: waiting for the joining node (in the background since the testbed's start)"
    ):
        found = joiner.result()
    phases.notes.append(
        "bootstrap, in the background: " + ", ".join(f"{name} {t:.0f} s" for name, t in found.times)
    )
    phases.notes.append("the node's own bootstrap, step by step (its log's clock):")
    phases.notes += [f"  {line}" for line in log_steps(found.log)]
    status, plan, node_ssh = found.status, found.plan, found.node_ssh
    log = "\n".join(found.log.splitlines()[-40:])
    assert status["configured"], f"{status}\n{log}"
    assert status["artifact"] == found.artifact_sha256

    # Only the stack's host key is trusted: with an empty known_hosts the node is refused.
    empty = found.files / "empty_known_hosts"
    empty.write_text("")
    refused = StrictSsh(found.node.ssh_port, found.files / "id_ed25519", empty).run(
        "true", check=False
    )
    assert refused.returncode != 0
    assert "Host key verification failed" in refused.stderr
    # What the roles made, on the node itself.
    mounts = node_ssh.run(f"findmnt -n -o FSTYPE {plan.checkpoint.mount}").stdout.split()
    assert mounts == [plan.checkpoint.filesystem]
    assert "NCCL" in node_ssh.run("cat /etc/nccl.conf").stdout
    # A serving node: no torch environment, and its serving checks' report in the status.
    assert node_ssh.run("test -e /opt/rackform/venv/bin/torchrun", check=False).returncode != 0
    checks = {c["name"]: c["status"] for c in status["checks"]}
    assert checks.get("model_mount") == "pass", status["checks"]

    # The Configure resource's refresh from the controller over the stack's access, after one
    # hand edit of /etc/nccl.conf: that node and that task, nothing else.
    drift = found.drift
    assert list(drift) == [found.node.name], drift
    assert drift[found.node.name], drift
    assert all(t.startswith("nccl_rdma : ") for t in drift[found.node.name]), drift
    assert found.content_hash == f"drifted:{found.node.name}"
