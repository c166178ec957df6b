"""The smoke job end to end on CPU: two gloo ranks under the real torchrun, in a loopback-only
network namespace where one can be made. A normal run passes with every check reported; each
fault (test-only switches of the job) fails clearly and within a bounded time. A killed rank
is tested through `rackform smoke` (tests/cli/test_smoke_cmd.py), where its report is composed.

The full-disk case is a real full filesystem: a 256 KiB tmpfs mounted in a private mount
namespace (the kernel answers ENOSPC). Where mounts are not allowed, the kernel's file-size
limit (RLIMIT_FSIZE, answered with EFBIG) makes the same write fail instead.

With `--object-tier` a directory (the shared file system's), each node's copy of its checkpoint
goes to <tier>/<host> and the job reports checkpoint_tier; an unwritable tier fails that check
alone, naming the node."""

from __future__ import annotations

import json
import os
import time

import pytest
from smoke_helpers import MOUNTS, isolated, torchrun

from validators import smoke
from validators.args import parse
from validators.smoke import CHECKS

pytestmark = pytest.mark.slow

FAST = ("--steps", "12", "--allreduce-max-mb", "0.25")


def run(tmp_path, *args, prefix=None, ckpt=None):
    out = tmp_path / "report.json"
    t0 = time.monotonic()
    r = torchrun(
        "--report", str(out), "--checkpoint-dir", str(ckpt or tmp_path / "ck"), *FAST, *args,
        prefix=prefix,
    )  # fmt: skip
    took = time.monotonic() - t0
    doc = json.loads(out.read_text()) if out.exists() else None
    if doc is None:  # whatever the test expects, say why there is no report
        print(f"no report; exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r, doc, took


def checks(doc) -> dict:
    return {c["name"]: c for c in doc["checks"]}


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def test_phases_never_add_up_to_more_than_the_job(monkeypatch):
    """Sub-millisecond phases each rounded on their own added up to 1 ms more than the job
    (CI saw 3.077 s of phases in a 3.076 s job); phases are cut on the job's millisecond grid."""
    clock = iter([100.0, 100.0006, 100.0012, 100.0018, 100.0024, 100.0024])
    monkeypatch.setattr(smoke.time, "monotonic", lambda: next(clock))
    job = smoke.Job(None, writer=False, facts={})
    for name in ("a", "b", "c"):
        job.phase(name)
    doc = job.flush(ended={"ranks": 1, "world_size": 1})
    assert doc["metrics"]["phases_s"] == {"a": 0.0, "b": 0.001, "c": 0.0}  # each 0.6 ms
    assert doc["job"]["duration_s"] == 0.002


def test_the_tier_check_is_expected_only_with_a_tier_and_pending_until_it_runs():
    assert smoke.expected_checks(parse(["--device", "cpu"])) == CHECKS
    a = parse(["--device", "cpu", "--object-tier", "/shared/smoke"])
    at = CHECKS.index("checkpoint_read") + 1
    expected = (*CHECKS[:at], "checkpoint_tier", *CHECKS[at:])
    assert smoke.expected_checks(a) == expected
    # A job that ended before its checkpoint phase lists the tier's check with the rest.
    job = smoke.Job(None, writer=False, facts={}, expected=smoke.expected_checks(a))
    assert job.flush()["pending"] == list(expected)


@pytest.fixture
def ckdir(tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    return d


def test_normal_run_passes_with_every_check(tmp_path, ckdir):
    started = time.time()
    r, doc, _ = run(tmp_path, "--heartbeat-file", str(tmp_path / "heartbeat.prom"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert doc["complete"] and doc["ok"] and doc["pending"] == []
    c = checks(doc)
    assert list(c) == list(CHECKS)
    assert c["loss_drop"]["status"] == "pass" and c["loss_drop"]["measured"] >= 0.2
    assert c["checkpoint_roundtrip"]["status"] == "pass"
    assert c["replicas_in_sync"]["status"] == "pass"
    assert c["allreduce_busbw"]["measured"] > 0  # measured, but no CPU threshold: not-run
    assert {c[n]["status"] for n in ("mfu", "nccl_version", "allreduce_busbw")} == {"not-run"}
    assert doc["metrics"]["training"]["tokens_per_s"] > 0
    phases = doc["metrics"]["phases_s"]  # every phase timed, in order, within the job's time
    assert list(phases) == [
        "device checks", "node self-measure", "all-reduce sweep", "training", "replica comparison",
        "checkpoint", "nccl",
    ]  # fmt: skip
    # The node measured alone: two ranks, one node, so an all-reduce within it; no GPU to copy to.
    perf = doc["metrics"]["node_perf"]
    assert perf["devices"] == 2 and perf["h2d_gbps"] is None
    assert perf["matmul_tflops"] > 0 and perf["local_busbw_gbps"] > 0
    assert perf["matmul_tflops"] == min(perf["matmul_tflops_per_device"])
    assert all(t >= 0 for t in phases.values()) and phases["training"] > 0
    assert sum(ms(t) for t in phases.values()) <= ms(doc["job"]["duration_s"])
    assert doc["job"]["world_size"] == 2 and doc["job"]["backend"] == "gloo"
    assert "smoke: PASSED" in r.stdout  # rank 0 prints the table
    assert list(ckdir.iterdir()) == []  # the checkpoint it wrote is gone
    # The job's progress for rackform reap: the time of a completed training step, as a gauge.
    beat = (tmp_path / "heartbeat.prom").read_text().splitlines()[-1].split()
    assert beat[0] == "rackform_job_heartbeat_timestamp_seconds"
    assert started <= float(beat[1]) <= time.time()


def test_stalled_collective_times_out(tmp_path, ckdir):
    r, doc, took = run(
        tmp_path, "--fault-stall-rank", "1", "--collective-timeout-s", "3", "--watchdog-s", "0"
    )
    assert r.returncode != 0
    assert took < 60
    assert "Timed out waiting 3000ms" in r.stderr
    assert doc["complete"] is False


def test_nan_loss_fails(tmp_path, ckdir):
    r, doc, _ = run(tmp_path, "--fault-nan-lr", "--fault-step", "3")
    assert r.returncode == 1
    c = checks(doc)["loss_drop"]
    assert c["status"] == "fail" and c["measured"] == "nan"
    assert "NaN/inf at step" in c["detail"]
    assert doc["complete"]  # the job still ran every other check
    assert checks(doc)["checkpoint_roundtrip"]["status"] == "pass"  # NaNs round-trip bit for bit


def _ro_prefix(d) -> list[str] | None:
    if os.geteuid() != 0:
        d.chmod(0o555)  # not root: permissions are enough
        return None
    if MOUNTS:
        return isolated(f"mount --bind -o ro {d} {d}")
    pytest.skip("root without mount namespaces: no way to make a read-only directory")


def test_read_only_checkpoint_dir(tmp_path, ckdir):
    # With a tier too: a node whose round trip wrote nothing has nothing to copy.
    (tmp_path / "shared").mkdir()
    r, doc, _ = run(tmp_path, "--object-tier", str(tmp_path / "shared"), prefix=_ro_prefix(ckdir))
    assert r.returncode == 1
    c = checks(doc)["checkpoint_roundtrip"]
    assert c["status"] == "fail"
    assert "cannot create" in c["detail"]
    assert "Read-only file system" in c["detail"] or "Permission denied" in c["detail"]
    assert checks(doc)["checkpoint_write"]["status"] == "not-run"
    assert checks(doc)["loss_drop"]["status"] == "pass"
    tiered = checks(doc)["checkpoint_tier"]
    assert tiered["status"] == "not-run" and "no checkpoint to copy on" in tiered["detail"]
    assert doc["complete"] and list((tmp_path / "shared").iterdir()) == []


def test_full_checkpoint_dir(tmp_path, ckdir):
    if MOUNTS:
        r, doc, _ = run(tmp_path, prefix=isolated(f"mount -t tmpfs -o size=256k tmpfs {ckdir}"))
        # torch reports ENOSPC either with errno's text or as its own zip-writer error; the job
        # then adds the free space it found, so one of the two must be there.
        want = ("No space left on device", "0.00 GB free there")
    else:
        r, doc, _ = run(tmp_path, "--fault-ckpt-fsize", "65536")
        want = ("RLIMIT_FSIZE",)
    assert r.returncode == 1
    c = checks(doc)["checkpoint_roundtrip"]
    assert c["status"] == "fail" and c["detail"].startswith(f"{os.uname().nodename}: write failed")
    assert any(w in c["detail"] for w in want), c["detail"]


def test_each_node_copies_its_checkpoint_to_the_tier(tmp_path, ckdir):
    """With --object-tier a directory (the shared file system's), the node's first rank copies
    the checkpoint its round trip wrote to <tier>/<host>, while the node reads it back, before
    the checkpoint is removed; the job reports checkpoint_tier after the round trip's checks."""
    (tmp_path / "shared" / "checkpoints").mkdir(parents=True)
    # As the plan names it (<tier>/smoke): made by the node where its parent is.
    tier = tmp_path / "shared" / "checkpoints" / "smoke"
    r, doc, _ = run(tmp_path, "--object-tier", str(tier))
    assert r.returncode == 0, r.stdout + r.stderr
    assert doc["complete"] and doc["ok"] and doc["pending"] == []
    c = checks(doc)
    at = CHECKS.index("checkpoint_read") + 1
    assert list(c) == [*CHECKS[:at], "checkpoint_tier", *CHECKS[at:]]
    host = doc["job"]["hosts"][0]
    assert c["checkpoint_tier"]["status"] == "pass", c["checkpoint_tier"]
    assert c["checkpoint_tier"]["measured"] == "1/1 nodes copied"
    assert f"{tier / host}: " in c["checkpoint_tier"]["detail"]
    assert (
        "GB/s" in c["checkpoint_tier"]["detail"] and "lag up to" in c["checkpoint_tier"]["detail"]
    )
    assert "read while the node's copy to the tier ran" in c["checkpoint_read"]["detail"]
    # The node's copy, complete: every file the manifest names, at its size; nothing else.
    copy = tier / host / "step-00000012"
    manifest = json.loads((copy / "COMPLETE").read_text())
    assert manifest["step"] == 12 and manifest["bytes"] > 0
    assert sorted(f["path"] for f in manifest["files"]) == sorted(
        p.name for p in copy.iterdir() if p.name != "COMPLETE"
    )
    assert all((copy / f["path"]).stat().st_size == f["size"] for f in manifest["files"])
    assert doc["metrics"]["checkpoint_tier"][host]["copies"][0]["bytes"] == manifest["bytes"]
    assert list(ckdir.iterdir()) == []  # the node's checkpoint removed, after the copy


def test_a_tier_that_refuses_the_copy_fails_the_check_naming_the_node(tmp_path, ckdir):
    """The tier's directory unwritable (mode 0555, or for root a read-only bind mount): the
    copy's failure is the checkpoint_tier check's, naming the node; every other check runs."""
    tier = tmp_path / "shared"
    tier.mkdir()
    r, doc, _ = run(tmp_path, "--object-tier", str(tier), prefix=_ro_prefix(tier))
    assert r.returncode == 1
    assert doc["complete"] and doc["pending"] == []
    c = checks(doc)
    host = doc["job"]["hosts"][0]
    tiered = c["checkpoint_tier"]
    assert tiered["status"] == "fail" and tiered["measured"] == "0/1 nodes copied"
    assert tiered["detail"].startswith(f"{host}: {tier / host}: step 12: "), tiered["detail"]
    assert "Read-only file system" in tiered["detail"] or "Permission denied" in tiered["detail"]
    assert [n for n, x in c.items() if x["status"] == "fail"] == ["checkpoint_tier"]
    assert c["checkpoint_roundtrip"]["status"] == "pass" and c["loss_drop"]["status"] == "pass"
    assert list(ckdir.iterdir()) == []
