"""The validators' command lines, built once. `rackform smoke` runs the job and the host checks with
these; the smoke_train role composes the same lines on the nodes (its variables
`_smoke_train_job_argv`, `_smoke_train_host_argv`) from the role variables the plan's inventory
hands it (the expectations, without a node count), and a test renders the role's composition and
holds it equal to these. The role keeps the last step itself because only the play knows it: how
many nodes the run spans, and each node's name."""

from __future__ import annotations

from collections.abc import Sequence

from rackform.plan.thresholds import Expectations


def job_argv(exp: Expectations, *, steps: int, checkpoint_dir: str, nodes: int | None) -> list[str]:
    """`validators.smoke`'s arguments: the run's own (steps, checkpoint directory, the nodes
    it must cover), then the blueprint's expectations and thresholds."""
    out = ["--steps", str(steps), "--checkpoint-dir", checkpoint_dir]
    if nodes is not None:
        out += ["--expect-nodes", str(nodes)]
    return out + exp.threshold_args()


def host_argv(
    exp: Expectations,
    *,
    storage_dir: str,
    probe_mb: int,
    expect_mount: str | None,
    node: str | None = None,
    run: str | None = None,
    peers: Sequence[str] = (),
) -> list[str]:
    """`validators.hostcheck`'s arguments: the node, the mount the checkpoint directory must
    be (only where it is the blueprint's array), the storage probe, the expectations, then with
    a shared tier the run's id and every node of the run (each reads the others' files)."""
    out = ["--node", node] if node else []
    if expect_mount:
        out += ["--expect-mount", expect_mount]
    out += ["--storage-dir", storage_dir, "--storage-probe-mb", str(probe_mb)]
    out += exp.host_args()
    if exp.shared_mount and run and peers:
        out += ["--shared-run", run, "--shared-peers", ",".join(peers)]
    return out
