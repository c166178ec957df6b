"""The audit: no check passes on evidence that does not support it.

For every check the host checks, the serving checks, the smoke job or the launcher can emit,
each case below feeds the function that decides it the evidence of a failure (or of nothing
measured) and asserts the verdict: fail, or not-run where nothing could be measured, never
pass. The last test finds every check name in validators/ by reading the source, so a new check
without a case here fails the suite. Pure calls wherever the verdict is computed apart from the measurement (no
process group, no GPU); the dcgmi, mount and storage cases run their real code on this machine.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from gpu_collection import VALIDATORS_DIR
from smoke_helpers import FakeNvml

from rackform.docs_gen import emitted_checks
from validators import (
    collectives,
    comm_checks,
    domain_checks,
    failure_costs,
    hostcheck,
    launch,
    link_checks,
    report,
    serving,
    serving_checks,
    serving_smoke,
    shared_checks,
    storage,
)
from validators.ckpt_checks import checkpoint_verdicts
from validators.device_checks import device_checks, node_count
from validators.model import config
from validators.nvlink_domain import GpuFabric, fabric_check, imex_check
from validators.report import FAIL, NOT_RUN, PASS, Check
from validators.resumable_train import steps_check
from validators.serving_checks import Expect
from validators.serving_load import Figures, Load
from validators.tier_checks import nodes_tier_check, tier_check, unused
from validators.train import TrainResult
from validators.train_checks import replicas_verdict, training_checks

CUDA, CPU = torch.device("cuda"), torch.device("cpu")  # a device object needs no GPU


# ---------------------------------------------------------------- evidence builders


def nvml(name: str, expect_gpus=8, **fake) -> Check:
    return by_name(hostcheck.nvml_checks(FakeNvml(**fake), expect_gpus))[name]


# A serving node of 4 GPUs on driver 550, as nvidia-smi answers each query (None: this
# nvidia-smi has no such field, or there is no nvidia-smi at all where the drivers are asked).
SMI = {
    "drivers": ("index,driver_version", "".join(f"{i}, 550.90.07\n" for i in range(4))),
    "ecc": ("index,ecc.errors.uncorrected.volatile.total", "0, 0\n1, 0\n2, 0\n3, 0\n"),
    "remap": (
        "index,remapped_rows.pending,remapped_rows.failure",
        "".join(f"{i}, No, No\n" for i in range(4)),
    ),
}


def smi(name: str, expect_gpus=4, **answers) -> Check:
    table = {q: answers.get(k, a) for k, (q, a) in SMI.items()}

    def query(fields):
        if table[",".join(fields)] is None:
            raise RuntimeError(f'nvidia-smi exited 2: Field "{fields[-1]}" is not a valid field')
        return table[",".join(fields)]

    return by_name(serving.gpu_checks(query, expect_gpus, "550"))[name]


UP = [1] * 18  # an H100 SXM's NVLinks, all up


def links(name: str, expect=18, gen=5, **fake) -> Check:
    """The link checks of an 8-GPU H100 SXM node (18 NVLinks each, PCIe gen 5)."""
    fake.setdefault("nvlinks", {g: UP for g in range(8)})
    return by_name(hostcheck.nvml_checks(FakeNvml(**fake), 8, "", expect, gen))[name]


def fabric(state="active", switches=("/dev/nvidia-nvswitch0",), expected=True, run=None) -> Check:
    def answer(argv, **kw):
        assert argv[1:] == ["is-active", "nvidia-fabricmanager"]
        return SimpleNamespace(returncode=0 if state == "active" else 3, stdout=state + "\n")

    return link_checks.fabric_manager_check(
        expected, switches=lambda: list(switches), run=run or answer, systemctl="/bin/systemctl"
    )


def hung(argv, **kw):
    raise subprocess.TimeoutExpired(argv, kw.get("timeout", 30))


def no_systemctl(monkeypatch, tmp_path) -> Check:
    monkeypatch.setattr(link_checks.shutil, "which", lambda exe: None)
    return link_checks.fabric_manager_check(True, switches=lambda: [])


# The serving smoke job: 8 streams of 512 + 128 tokens, a p99 TTFT objective of 500 ms and
# inter-token of 50 ms, on an H100 (its HBM bandwidth; no MBU floor measured yet).
SERVE_LOAD = Load(concurrency=8, prompt_tokens=512, output_tokens=128, requests=16)
SERVE = Expect(
    ttft_p99_ms=500, itl_p99_ms=50, dtype_bytes=2, gpu_model="H100-SXM", hbm_tbps=3.35,
    shape={"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128},
    expected_peak_bytes=20_000_000_000, price_usd_hr=98.32,
)  # fmt: skip


def serving_fig(complete=16, ttft=(100.0, 200.0), itl=(10.0, 20.0), decode=800.0, output=700.0):
    return Figures(16, complete, ttft, itl, 4e4, decode, output, 3.0, ())


def serve(tmp_path: Path, *extra: str) -> Check:
    """The serving smoke job run on this CPU (a tiny stand-in or what `extra` names); its last
    check, the one the run ended on."""
    out = tmp_path / "serving.json"
    serving_smoke.main(
        ["--device", "cpu", "--report", str(out), "--no-table", "--dtype-bytes", "2",
         "--concurrency", "2", "--prompt-tokens", "4", "--output-tokens", "2",
         "--ttft-p99-ms", "1000", "--itl-p99-ms", "1000", "--layers", "2", "--hidden", "64",
         "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--scratch", str(tmp_path), *extra]
    )  # fmt: skip
    return report.checks_of(json.loads(out.read_text()))[-1]


# A GB200 tray's GPUs as `nvidia-smi -q`'s Fabric sections give them (tests/validators/
# test_nvlink_domain.py reads them from the documented output itself).
def tray(*odd: GpuFabric) -> list[GpuFabric]:
    good = [
        GpuFabric(f"0000000{i}:01:00.0", "Completed", "Success", "32766", "c-1") for i in range(4)
    ]
    return [*good[: 4 - len(odd)], *odd]


IMEX_UP = (
    "Nodes:\nNode #0 - 10.40.1.11 - READY\nNode #1 - 10.40.1.12 - READY\n"
    " Nodes From\\To  0   1\n       0        C   C\n       1        C   C\nDomain State: UP\n"
)


def by_name(checks) -> dict[str, Check]:
    return {c.name: c for c in checks}


def dev_args(**kw) -> SimpleNamespace:
    base = {
        "expect_nodes": None,
        "expect_gpus": None,
        "expect_gpu_model": None,
        "expect_gpu_pattern": None,
    }
    return SimpleNamespace(**{**base, **kw})


H100 = "NVIDIA H100 80GB HBM3"
PATTERN = r"H100 80GB HBM3|H100 SXM"


def device(name: str, facts: list[dict], nodes: int = 1, **kw) -> Check:
    return by_name(device_checks(dev_args(**kw), facts, nodes))[name]


def gpus(n: int, model: str = H100, host: str = "n1") -> dict:
    return {"host": host, "gpus": n, "names": [model] * n}


def training(name: str, losses, nan_step=None, device=CPU, timed=(20, 2.0), **kw) -> Check:
    args = SimpleNamespace(**{"loss_drop": 0.2, "peak_tflops": 989.0, "mfu_min": 25.0, **kw})
    res = TrainResult(losses=list(losses), nan_step=nan_step)
    res.timed_steps, res.timed_s = timed
    checks = training_checks(args, {}, res, config("tiny"), 100_000_000, device, 8)
    return by_name(checks)[name]


FALLING = [5.0, 3.0, 1.0, 0.5, 0.4, 0.3]


def point(busbw: float) -> collectives.Point:
    return collectives.Point(4 << 30, 0.01, busbw / 1.75, busbw)


def rank(host="n1", error=None, nbytes=1000, write=2.0, read=3.0, mism=(), compared=12):
    return (host, error, nbytes, write, read, list(mism), compared)


def ckpt(name: str, ranks: list[tuple], write_min=1.0) -> Check:
    return by_name(checkpoint_verdicts(ranks, write_min))[name]


def transport(network, paths=("NET/IB/0",)) -> collectives.Transport:
    return collectives.Transport(network, tuple(paths))


def job(doc, rc=0, lines=(), timed_out=False, timeout_s=900) -> Check:
    composed = launch.compose(None, doc, launch.Proc(rc, list(lines), timed_out), timeout_s)
    return by_name(report.checks_of(composed))["job_completed"]


def job_report(ended: dict | None, world=2, complete=True) -> dict:
    extra = {"ended": ended} if ended is not None else {}
    return report.make([], complete=complete, pending=[], job={"world_size": world}, **extra)


ROOT_CAUSE_SIGKILL = """\
Root Cause (first observed failure):
[0]:
  host      : n1
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 7)
  traceback : Signal 9 (SIGKILL) received by PID 7
============================================================""".splitlines()


def diag(results, rc=0) -> Check:
    return hostcheck.diag_verdict(results, "no failures at r1", rc=rc)


def dcgmi_absent(monkeypatch, tmp_path) -> Check:
    monkeypatch.setenv("PATH", str(tmp_path))
    return hostcheck.dcgm_check(1)


def storage_with(monkeypatch, gbps, error=None, minimum=4.0, tmp_path=None) -> Check:
    monkeypatch.setattr(storage, "measure", lambda d, mb: storage.Ceiling(gbps, "probe", error))
    return hostcheck.storage_check(str(tmp_path), 64, minimum)


COPY = {"step": 10, "bytes": 1 << 20, "seconds": 0.5, "gbps": 0.002, "lag_s": 0.6}


def node_tier(host: str, **over) -> dict:
    """A node's summary of its copy of the round trip's checkpoint (step 30) to the tier."""
    copy = {**COPY, "step": 30}
    return {"url": f"/shared/smoke/{host}", "copies": [copy], "errors": [], "superseded": [],
            "newest": 30, "asked": 1, "unfinished": False, "pending": 0, **over}  # fmt: skip


def shared(mount: Path) -> list[Check]:
    """The shared tier's three checks on `mount` (run, peers and a rate given)."""
    args = argparse.Namespace(
        shared_mount=str(mount), node="a", shared_read_dir=None, shared_read_mb=16,
        shared_read_min_gbps=0.1, shared_read_timeout_s=30, shared_run="r",
        shared_peers="a,b", shared_wait_s=0.2,
    )  # fmt: skip
    return hostcheck.shared_checks_for(args)


def unreadable(tmp_path: Path) -> Path:
    """A mount whose probe directory's place is taken by a file: nothing can be written or read."""
    (tmp_path / ".rackform").write_text("")
    return tmp_path


def stale(tmp_path: Path) -> Path:
    d = tmp_path / ".rackform" / "validate" / "r" / "b"
    d.mkdir(parents=True)
    (d / "token").write_text(json.dumps({"node": "b", "run": "r", "time": time.time() - 7200}))
    return tmp_path


# ---------------------------------------------------------------- the cases


# (check name, what the evidence shows, the verdict it must get, the call). A call taking
# (monkeypatch, tmp_path) runs with them.
def lost_runs(redone: int) -> dict:
    """The record of an elastic job that lost one of two nodes at step 20 + `redone`."""
    failure = {"seen": 50.0, "lost_at_step": 20 + redone, "resumed_from_step": 20,
               "world_before": 2, "world_after": 1, "redone_steps": redone, "redone_s": 1.0,
               "detect_s": 0.1, "continue_s": 9.0, "error": "Connection reset by peer"}  # fmt: skip
    runs = [{"started": 0.0, "world": 2, "nodes": 2, "ended": "killed"},
            {"started": 60.0, "world": 1, "nodes": 1, "ended": "completed", "stopped": 90.0}]  # fmt: skip
    return {"runs": runs, "failures": [failure]}


CASES: list[tuple[str, str, str, Callable]] = [
    # host checks: NVML
    ("nvml_gpu_count", "7 GPUs where 8 are declared", FAIL, lambda: nvml("nvml_gpu_count", gpus=7)),
    ("nvml_gpu_count", "no NVML (no driver) where GPUs are declared", FAIL,
     lambda: hostcheck.nvml_checks(None, 8)[0]),
    ("nvml_gpu_count", "no count declared", NOT_RUN, lambda: nvml("nvml_gpu_count", None)),
    ("ecc_uncorrectable", "2 uncorrectable errors on GPU 5", FAIL,
     lambda: nvml("ecc_uncorrectable", ecc={5: 2})),
    ("ecc_uncorrectable", "a GPU whose counter cannot be read (lost)", FAIL,
     lambda: nvml("ecc_uncorrectable", lost={3})),
    ("ecc_uncorrectable", "no GPU to read: zero errors counted over nothing", NOT_RUN,
     lambda: nvml("ecc_uncorrectable", gpus=0)),
    ("ecc_uncorrectable", "ECC not supported on any GPU", NOT_RUN,
     lambda: nvml("ecc_uncorrectable", ecc_supported=False)),
    ("ecc_uncorrectable", "no NVML", NOT_RUN, lambda: hostcheck.nvml_checks(None, 8)[1]),
    ("row_remap", "a pending remap", FAIL, lambda: nvml("row_remap", remap={1: (True, False)})),
    ("row_remap", "a failed remap", FAIL, lambda: nvml("row_remap", remap={1: (False, True)})),
    ("row_remap", "a GPU whose remap state cannot be read (lost)", FAIL,
     lambda: nvml("row_remap", lost={0})),
    ("row_remap", "no GPU to read", NOT_RUN, lambda: nvml("row_remap", gpus=0)),
    ("row_remap", "no NVML", NOT_RUN, lambda: hostcheck.nvml_checks(None, 8)[2]),
    # host checks: the GPUs' links
    ("nvlink_up", "GPU 3 with 17 of its 18 NVLinks up", FAIL,
     lambda: links("nvlink_up", nvlinks={**{g: UP for g in range(8)}, 3: [1] * 17 + [0]})),
    ("nvlink_up", "no NVLink reported on an 8-GPU node (PCIe for every peer)", FAIL,
     lambda: links("nvlink_up", nvlinks={})),
    ("nvlink_up", "a GPU fallen off the bus", FAIL, lambda: links("nvlink_up", lost={2})),
    ("nvlink_up", "links up but fewer than the model has (12 of 18)", FAIL,
     lambda: links("nvlink_up", nvlinks={g: [1] * 12 for g in range(8)})),
    ("nvlink_up", "one GPU: no peer to reach", NOT_RUN, lambda: links("nvlink_up", gpus=1)),
    ("nvlink_up", "a model without NVLink", NOT_RUN, lambda: links("nvlink_up", expect=None)),
    ("nvlink_up", "no NVML", NOT_RUN, lambda: hostcheck.nvml_checks(None, 8)[3]),
    ("pcie_link", "GPU 5 trained down to x8", FAIL,
     lambda: links("pcie_link", pcie={5: (8, 16, 5, 5)})),
    ("pcie_link", "a gen 4 slot under a gen 5 GPU", FAIL,
     lambda: links("pcie_link", pcie={0: (16, 16, 4, 5)})),
    ("pcie_link", "below the GPU's own generation where the catalog names none", FAIL,
     lambda: links("pcie_link", gen=None, pcie={0: (16, 16, 3, 4)})),
    ("pcie_link", "a GPU fallen off the bus", FAIL, lambda: links("pcie_link", lost={1})),
    ("pcie_link", "no GPU to read", NOT_RUN, lambda: links("pcie_link", gpus=0)),
    ("pcie_link", "no NVML", NOT_RUN, lambda: hostcheck.nvml_checks(None, 8)[4]),
    ("fabric_manager", "NVSwitches present, the fabric manager inactive", FAIL,
     lambda: fabric("inactive", expected=False)),
    ("fabric_manager", "the model's nodes have NVSwitches, the fabric manager failed", FAIL,
     lambda: fabric("failed", switches=())),
    ("fabric_manager", "systemctl does not answer", FAIL, lambda: fabric(run=hung)),
    ("fabric_manager", "no NVSwitch on the node", NOT_RUN,
     lambda: fabric(switches=(), expected=False)),
    ("fabric_manager", "no systemctl to ask", NOT_RUN, no_systemctl),
    # host checks: a rack-scale tray's NVLink fabric and IMEX domain
    ("gpu_fabric", "a GPU whose fabric registration is In Progress", FAIL,
     lambda: fabric_check(tray(GpuFabric("00000019:01:00.0", "In Progress", "N/A", "N/A", "N/A")))),
    ("gpu_fabric", "Completed with a failed status", FAIL,
     lambda: fabric_check(tray(GpuFabric("00000019:01:00.0", "Completed", "NVML_ERROR_UNKNOWN", "32766", "c-1")))),
    ("gpu_fabric", "a GPU in another clique than the tray's others", FAIL,
     lambda: fabric_check(tray(GpuFabric("00000019:01:00.0", "Completed", "Success", "4", "c-1")))),
    ("gpu_fabric", "no Fabric section (not supported)", FAIL,
     lambda: fabric_check(tray(GpuFabric("00000019:01:00.0")))),
    ("gpu_fabric", "no GPU listed", FAIL, lambda: fabric_check([])),
    ("imex_domain", "a tray missing from IMEX's list", FAIL,
     lambda: imex_check(IMEX_UP, ["10.40.1.11", "10.40.1.12", "10.40.1.13"])),
    ("imex_domain", "a tray not READY", FAIL,
     lambda: imex_check(IMEX_UP.replace("12 - READY", "12 - UNAVAILABLE"), ["10.40.1.11", "10.40.1.12"])),
    ("imex_domain", "a pair never connected", FAIL,
     lambda: imex_check(IMEX_UP.replace("0        C   C", "0        C   N"), ["10.40.1.11", "10.40.1.12"])),
    ("imex_domain", "the domain not UP", FAIL,
     lambda: imex_check(IMEX_UP.replace(": UP", ": DOWN"), ["10.40.1.11", "10.40.1.12"])),
    ("imex_domain", "nvidia-imex-ctl gave nothing", FAIL,
     lambda: imex_check(None, ["10.40.1.11"], why="nvidia-imex-ctl is not installed")),
    # host checks: DCGM
    ("dcgm_diag", "a failed test", FAIL, lambda: diag([("memory", "fail", "ECC"), ("pcie", "pass", "")])),
    ("dcgm_diag", "a status word not known", FAIL,
     lambda: diag([("pcie", "unknown", ""), ("sw", "pass", "")])),
    ("dcgm_diag", "every test skipped", NOT_RUN, lambda: diag([("pcie", "skip", "")])),
    ("dcgm_diag", "no result at all", NOT_RUN, lambda: diag([])),
    ("dcgm_diag", "dcgmi exited non-zero while listing passes", FAIL,
     lambda: diag([("sw", "pass", "")], rc=226)),
    ("dcgm_diag", "dcgmi not installed", NOT_RUN, dcgmi_absent),
    # host checks: the checkpoint array
    ("checkpoint_mount", "a plain directory (the array not mounted)", FAIL,
     lambda monkeypatch, tmp_path: hostcheck.mount_check(str(tmp_path))),
    ("checkpoint_mount", "no such directory", FAIL,
     lambda monkeypatch, tmp_path: hostcheck.mount_check(str(tmp_path / "missing"))),
    ("checkpoint_mount", "no mount declared", NOT_RUN, lambda: hostcheck.mount_check(None)),
    ("checkpoint_mount", "a mount point, read-only (the table says ro)", FAIL,
     lambda monkeypatch, tmp_path: (
         monkeypatch.setattr(hostcheck, "read_only", lambda d: d == "/"),
         hostcheck.mount_check("/"),
     )[1]),
    ("storage_write_ceiling", "below 0.8 x the declared speed", FAIL,
     lambda monkeypatch, tmp_path: storage_with(monkeypatch, 1.0, tmp_path=tmp_path)),
    ("storage_write_ceiling", "the probe's write failed", FAIL,
     lambda monkeypatch, tmp_path: storage_with(monkeypatch, None, "ENOSPC", tmp_path=tmp_path)),
    ("storage_write_ceiling", "a NaN figure", FAIL,
     lambda monkeypatch, tmp_path: storage_with(monkeypatch, math.nan, tmp_path=tmp_path)),
    ("storage_write_ceiling", "the checkpoint directory is missing", FAIL,
     lambda monkeypatch, tmp_path: hostcheck.storage_check(str(tmp_path / "no"), 8, 1.0)),
    ("storage_write_ceiling", "no declared speed", NOT_RUN,
     lambda monkeypatch, tmp_path: storage_with(monkeypatch, 9.0, minimum=None, tmp_path=tmp_path)),
    # host checks: the shared tier
    ("shared_mount", "a plain directory (nothing mounted)", FAIL,
     lambda monkeypatch, tmp_path: shared(tmp_path)[0]),
    ("shared_mount", "no such directory", FAIL,
     lambda monkeypatch, tmp_path: shared(tmp_path / "gone")[0]),
    ("shared_read", "the tier is not mounted: the root disk is not measured", NOT_RUN,
     lambda monkeypatch, tmp_path: shared(tmp_path)[1]),
    ("shared_read", "slower than the node's GPUs consume", FAIL,
     lambda monkeypatch, tmp_path: shared_checks.read_check(str(tmp_path), None, 16, 1e6, 30)),
    ("shared_read", "no data rate to compare with", NOT_RUN,
     lambda monkeypatch, tmp_path: shared_checks.read_check(str(tmp_path), None, 16, None, 30)),
    ("shared_read", "the read is unreadable (a directory for a mount that is a file)", FAIL,
     lambda monkeypatch, tmp_path: shared_checks.read_check(str(unreadable(tmp_path)), None, 16, 0.1, 30)),
    ("shared_visible", "a peer's file never appears (another file system)", FAIL,
     lambda monkeypatch, tmp_path: shared_checks.visible_check(str(tmp_path), "r", "a", ["a", "b"], 0.2, 0.05)),
    ("shared_visible", "only an older run's file of the peer", FAIL,
     lambda monkeypatch, tmp_path: shared_checks.visible_check(str(stale(tmp_path)), "r", "a", ["a", "b"], 0.2, 0.05)),
    ("shared_visible", "the tier is not mounted", NOT_RUN,
     lambda monkeypatch, tmp_path: shared(tmp_path)[2]),
    ("shared_visible", "no peers given", NOT_RUN,
     lambda monkeypatch, tmp_path: shared_checks.visible_check(str(tmp_path), "r", "a", [], 1)),
    # serving checks: nvidia-smi (no pynvml on a fresh node), judged as the host checks judge
    ("gpu_count", "nvidia-smi lists 3 GPUs where 4 are declared", FAIL,
     lambda: smi("gpu_count", drivers="0, 550.90.07\n1, 550.90.07\n2, 550.90.07\n")),
    ("gpu_count", "no nvidia-smi (no driver) where GPUs are declared", FAIL,
     lambda: smi("gpu_count", drivers=None)),
    ("driver_branch", "a GPU on another branch", FAIL,
     lambda: smi("driver_branch", drivers="0, 550.90.07\n1, 535.183.01\n")),
    ("driver_branch", "nvidia-smi lists no GPU", FAIL, lambda: smi("driver_branch", drivers="")),
    ("driver_branch", "no nvidia-smi", NOT_RUN, lambda: smi("driver_branch", drivers=None)),
    ("ecc_uncorrectable", "nvidia-smi: 3 uncorrectable errors on GPU 1", FAIL,
     lambda: smi("ecc_uncorrectable", ecc="0, 0\n1, 3\n2, 0\n3, 0\n")),
    ("ecc_uncorrectable", "nvidia-smi: a GPU whose counter it cannot read", FAIL,
     lambda: smi("ecc_uncorrectable", ecc="0, 0\n1, [Unknown Error]\n2, 0\n3, 0\n")),
    ("ecc_uncorrectable", "nvidia-smi: ECC not supported on any GPU", NOT_RUN,
     lambda: smi("ecc_uncorrectable", ecc="0, [N/A]\n1, [N/A]\n2, [N/A]\n3, [N/A]\n")),
    ("row_remap", "nvidia-smi: a failed remap", FAIL,
     lambda: smi("row_remap", remap="0, No, No\n1, No, Yes\n2, No, No\n3, No, No\n")),
    ("row_remap", "this nvidia-smi has no remap fields", NOT_RUN,
     lambda: smi("row_remap", remap=None)),
    ("model_mount", "a plain directory (nothing mounted)", FAIL,
     lambda monkeypatch, tmp_path: serving.mount_check(str(tmp_path))),
    ("model_mount", "no such directory", FAIL,
     lambda monkeypatch, tmp_path: serving.mount_check(str(tmp_path / "missing"))),
    ("model_mount", "no storage mount declared", NOT_RUN, lambda: serving.mount_check("")),
    # the resumable job's copies to object storage
    ("checkpoint_tier", "the store refused a copy", FAIL,
     lambda: tier_check({"url": "s3://b/p", "copies": [], "errors": ["step 10: NoSuchBucket"],
                         "unfinished": False, "newest": 10, "asked": 1}, 60)),
    ("checkpoint_tier", "a copy still running at the deadline", FAIL,
     lambda: tier_check({"url": "s3://b/p", "copies": [COPY], "errors": [], "unfinished": True,
                         "newest": 20, "asked": 2}, 60)),
    ("checkpoint_tier", "the newest checkpoint not on the tier, no error said", FAIL,
     lambda: tier_check({"url": "s3://b/p", "copies": [COPY], "errors": [], "unfinished": False,
                         "superseded": [], "newest": 20, "asked": 2}, 60)),
    ("checkpoint_tier", "no checkpoint in this run", NOT_RUN,
     lambda: tier_check({"url": "s3://b/p", "copies": [], "errors": [], "unfinished": False,
                         "newest": 0, "asked": 0}, 60)),
    # the smoke job's copies, one per node
    ("checkpoint_tier", "one node's copy refused, the other's done", FAIL,
     lambda: nodes_tier_check({"a": node_tier("a"), "b": node_tier("b", errors=["step 30: EROFS"])}, 60)),
    ("checkpoint_tier", "one node's copy still running at the deadline", FAIL,
     lambda: nodes_tier_check({"a": node_tier("a", unfinished=True), "b": node_tier("b")}, 60)),
    ("checkpoint_tier", "a node whose tier could not be used at all", FAIL,
     lambda: nodes_tier_check({"a": unused("s3://b/p/a", "no boto3"), "b": node_tier("b")}, 60)),
    ("checkpoint_tier", "a node with no checkpoint to copy (its round trip failed)", NOT_RUN,
     lambda: nodes_tier_check({"a": node_tier("a", copies=[], asked=0), "b": node_tier("b")}, 60)),
    ("checkpoint_tier", "no node reported", NOT_RUN, lambda: nodes_tier_check({}, 60)),
    # the job: the nodes and GPUs
    ("node_count", "1 node where the group has 4 (a local run)", FAIL,
     lambda: node_count(1, 4, ["n1"])),
    ("node_count", "more nodes than declared", FAIL, lambda: node_count(3, 2, ["a", "b", "c"])),
    ("node_count", "no count declared (no blueprint)", NOT_RUN, lambda: node_count(1, None, ["n1"])),
    ("gpu_count", "7 GPUs where 8 are declared", FAIL,
     lambda: device("gpu_count", [gpus(7)], expect_gpus=8)),
    ("gpu_count", "no GPU where 8 are declared (CPU run)", FAIL,
     lambda: device("gpu_count", [gpus(0)], expect_gpus=8)),
    ("gpu_count", "one node short of GPUs among several", FAIL,
     lambda: next(c for c in device_checks(dev_args(expect_gpus=8), [gpus(8, host="a"), gpus(7, host="b")], 2)
                  if c.name == "gpu_count" and c.node == "b")),
    ("gpu_model", "another model than declared", FAIL,
     lambda: device("gpu_model", [gpus(8, "NVIDIA A100-SXM4-80GB")], expect_gpu_model="H100-SXM",
                    expect_gpu_pattern=PATTERN)),
    ("gpu_model", "an H100 PCIe where SXM is declared", FAIL,
     lambda: device("gpu_model", [gpus(8, "NVIDIA H100 PCIe")], expect_gpu_model="H100-SXM",
                    expect_gpu_pattern=PATTERN)),
    ("gpu_model", "no GPU where one is declared", FAIL,
     lambda: device("gpu_model", [gpus(0)], expect_gpu_model="H100-SXM", expect_gpu_pattern=PATTERN)),
    ("gpu_model", "no device-name pattern for the model", NOT_RUN,
     lambda: device("gpu_model", [gpus(8)], expect_gpu_model="H100-SXM")),
    # the job: the fabric
    ("allreduce_busbw", "below the floor", FAIL,
     lambda: comm_checks.allreduce_verdict([point(40.0), point(300.0)], 8, True, 460.0)),
    ("allreduce_busbw", "a NaN figure", FAIL,
     lambda: comm_checks.allreduce_verdict([point(math.nan)], 8, True, 460.0)),
    ("allreduce_busbw", "no message size measured", FAIL,
     lambda: comm_checks.allreduce_verdict([], 8, True, 460.0)),
    ("allreduce_busbw", "gloo on CPU, however fast", NOT_RUN,
     lambda: comm_checks.allreduce_verdict([point(9999.0)], 2, False, 460.0)),
    ("allreduce_busbw", "one rank (nothing moves)", NOT_RUN,
     lambda: comm_checks.allreduce_verdict([], 1, True, 460.0)),
    ("allreduce_busbw", "no calibrated floor", NOT_RUN,
     lambda: comm_checks.allreduce_verdict([point(500.0)], 8, True, None)),
    # the job: training
    ("loss_drop", "the loss did not fall", FAIL, lambda: training("loss_drop", [5.0] * 6)),
    ("loss_drop", "the loss rose", FAIL, lambda: training("loss_drop", [1.0, 2.0, 3.0, 4.0])),
    ("loss_drop", "NaN at step 3 (after falling)", FAIL,
     lambda: training("loss_drop", [5.0, 1.0, 0.5, math.nan], nan_step=3)),
    ("loss_drop", "no step ran", FAIL, lambda: training("loss_drop", [])),
    ("mfu", "below the floor", FAIL,
     lambda: training("mfu", FALLING, device=CUDA, timed=(20, 2000.0))),
    ("mfu", "no timed step (stopped in warm-up)", FAIL,
     lambda: training("mfu", FALLING, device=CUDA, timed=(0, 0.0))),
    ("mfu", "no peak known for the GPU", NOT_RUN,
     lambda: training("mfu", FALLING, device=CUDA, peak_tflops=None)),
    ("mfu", "on CPU", NOT_RUN, lambda: training("mfu", FALLING)),
    ("replicas_in_sync", "rank 1's weights differ", FAIL,
     lambda: replicas_verdict([["1.0", "2.0"], ["1.0", "2.5"]])),
    ("replicas_in_sync", "NaN weights on every rank (identical, and meaningless)", FAIL,
     lambda: replicas_verdict([["nan", "1.0"], ["nan", "1.0"]])),
    ("replicas_in_sync", "infinite weights", FAIL, lambda: replicas_verdict([["inf"], ["inf"]])),
    # the job: the checkpoint
    ("checkpoint_roundtrip", "a node could not write", FAIL,
     lambda: ckpt("checkpoint_roundtrip", [rank(), rank("n2", error="write failed: ENOSPC")])),
    ("checkpoint_roundtrip", "an entry read back differs", FAIL,
     lambda: ckpt("checkpoint_roundtrip", [rank(mism=["model.w"])])),
    ("checkpoint_roundtrip", "rank 0 of a node differs, its last rank does not", FAIL,
     lambda: ckpt("checkpoint_roundtrip", [rank(mism=["optim.state"]), rank()])),
    ("checkpoint_roundtrip", "nothing was compared", FAIL,
     lambda: ckpt("checkpoint_roundtrip", [rank(compared=0)])),
    ("checkpoint_write", "below the floor on the slowest node", FAIL,
     lambda: ckpt("checkpoint_write", [rank(write=5.0), rank("n2", write=0.5)])),
    ("checkpoint_write", "the slow rank of a node", FAIL,
     lambda: ckpt("checkpoint_write", [rank(write=0.2), rank(write=5.0)])),
    ("checkpoint_write", "no figure", FAIL, lambda: ckpt("checkpoint_write", [rank(write=None)])),
    ("checkpoint_write", "the round trip failed", NOT_RUN,
     lambda: ckpt("checkpoint_write", [rank(error="cannot create")])),
    ("checkpoint_write", "no floor", NOT_RUN,
     lambda: ckpt("checkpoint_write", [rank(write=0.01)], write_min=None)),
    ("checkpoint_read", "any speed (no read threshold exists)", NOT_RUN,
     lambda: ckpt("checkpoint_read", [rank(read=100.0)])),
    ("checkpoint_read", "the round trip failed", NOT_RUN,
     lambda: ckpt("checkpoint_read", [rank(error="read failed")])),
    # the resumable job
    ("steps_completed", "the loss went NaN half-way", FAIL, lambda: steps_check(12, 20, "diverged")),
    ("steps_completed", "stopped on SIGTERM, its checkpoint written", NOT_RUN,
     lambda: steps_check(12, 20, "SIGTERM")),
    # the elastic resumable job: what a lost node cost
    ("lost_node", "more steps redone than one checkpoint interval (resumed from an older one)",
     FAIL, lambda: failure_costs.checks(lost_runs(redone=12), 5, None, 100.0)[0]),
    ("elastic_min_nodes", "a run on fewer nodes than the minimum", FAIL,
     lambda: failure_costs.checks(lost_runs(redone=2), 5, 2, 100.0)[-1]),
    # the job: NCCL
    ("nccl_version", "older than declared", FAIL, lambda: comm_checks.nccl_version_check("2.18.1", "2.21.5")),
    ("nccl_version", "torch reports no NCCL", FAIL, lambda: comm_checks.nccl_version_check(None, "2.21.5")),
    ("nccl_version", "a version that does not parse", FAIL,
     lambda: comm_checks.nccl_version_check("2.21.5a", "2.21.5")),
    ("nccl_version", "no version declared", NOT_RUN, lambda: comm_checks.nccl_version_check("2.21.5", None)),
    ("nccl_version", "gloo on CPU", NOT_RUN,
     lambda: comm_checks.nccl_checks(SimpleNamespace(), CPU, None)[0]),
    ("nccl_transport", "sockets where EFA is declared", FAIL,
     lambda: comm_checks.nccl_transport_check(transport("Socket"), "efa", "log")),
    ("nccl_transport", "IB where EFA is declared", FAIL,
     lambda: comm_checks.nccl_transport_check(transport("IB"), "efa", "log")),
    ("nccl_transport", "channels but no network line", FAIL,
     lambda: comm_checks.nccl_transport_check(transport(None), "infiniband", "log")),
    ("nccl_transport", "no NCCL log", NOT_RUN,
     lambda: comm_checks.nccl_transport_check(None, "efa", "/nope")),
    ("nccl_transport", "gloo on CPU", NOT_RUN,
     lambda: comm_checks.nccl_checks(SimpleNamespace(), CPU, None)[1]),
    # the launcher
    ("job_completed", "complete per rank 0, torchrun exit 1 (the issue)", FAIL,
     lambda: job(job_report(None), rc=1)),
    ("job_completed", "the end marker, then a rank killed on its way out", FAIL,
     lambda: job(job_report({"ranks": 2, "world_size": 2}), rc=1, lines=ROOT_CAUSE_SIGKILL)),
    ("job_completed", "exit 0, no end marker", FAIL, lambda: job(job_report(None, complete=False))),
    ("job_completed", "exit 0, the marker short of the world", FAIL,
     lambda: job(job_report({"ranks": 1, "world_size": 2}))),
    ("job_completed", "no report at all", FAIL, lambda: job(None)),
    ("job_completed", "the run's deadline", FAIL,
     lambda: job(job_report({"ranks": 2, "world_size": 2}), rc=-15, timed_out=True)),
    ("job_completed", "never started (numpy missing)", FAIL,
     lambda: by_name(report.checks_of(launch.compose(None, None, None, 900, not_started="numpy")))[
         "job_completed"]),
    ("smoke_job_checks", "the job wrote no report", NOT_RUN,
     lambda: by_name(report.checks_of(launch.compose(None, None, launch.Proc(1, [], False), 900)))[
         "smoke_job_checks"]),
    ("host_checks", "the host checks wrote no report", FAIL,
     lambda: report.checks_of(launch.host_missing(launch.Proc(1, ["Segmentation fault"], False)))[0]),
    # the serving smoke job: its judge (pure), and its own run where the verdict is the job's
    ("model_load", "the mount does not exist", FAIL,
     lambda monkeypatch, tmp_path: serve(tmp_path, "--model-path", str(tmp_path / "none"))),
    ("serving_job", "the mount vanished after the engine answered", FAIL,
     lambda monkeypatch, tmp_path: serve(tmp_path, "--endpoint", "http://127.0.0.1:9",
                                         "--served-model", "m", "--model-path", str(tmp_path / "x"))),
    ("deadline", "the deadline passed", FAIL,
     lambda monkeypatch, tmp_path: serve(tmp_path, "--deadline-s", "0.000001")),
    ("model_shape", "another model on the mount", FAIL,
     lambda: serving_checks.shape_check(SERVE, {**SERVE.shape, "layers": 2}, False)),
    ("model_shape", "a stand-in model", NOT_RUN,
     lambda: serving_checks.shape_check(SERVE, SERVE.shape, True)),
    ("generation", "two requests short", FAIL,
     lambda: serving_checks.generation_check(serving_fig(complete=14), SERVE_LOAD)),
    ("ttft_p99", "over the objective", FAIL,
     lambda: serving_checks.latency_checks(serving_fig(ttft=(100.0, 900.0)), SERVE)[0]),
    ("ttft_p99", "no token ever came", FAIL,
     lambda: serving_checks.latency_checks(serving_fig(ttft=(None, None)), SERVE)[0]),
    ("itl_p99", "over the objective", FAIL,
     lambda: serving_checks.latency_checks(serving_fig(itl=(20.0, 80.0)), SERVE)[1]),
    ("prefill_tokens_per_s", "no calibrated floor", NOT_RUN,
     lambda: serving_checks.rate_checks(serving_fig(), SERVE_LOAD, SERVE)[0]),
    ("decode_tokens_per_s", "below what the objective implies", FAIL,
     lambda: serving_checks.rate_checks(serving_fig(decode=100.0), SERVE_LOAD, SERVE)[1]),
    ("decode_tokens_per_s", "nothing decoded", FAIL,
     lambda: serving_checks.rate_checks(serving_fig(decode=None), SERVE_LOAD, SERVE)[1]),
    ("mbu", "below the calibrated floor", FAIL,
     lambda: serving_checks.mbu_check("cuda", serving_fig(itl=(40.0, 45.0)), 14e9,
                                      Expect(**{**SERVE.__dict__, "mbu_min_pct": 50.0}))[0]),
    ("mbu", "no floor measured on this GPU", NOT_RUN,
     lambda: serving_checks.mbu_check("cuda", serving_fig(), 14e9, SERVE)[0]),
    ("mbu", "no decode step timed", FAIL,
     lambda: serving_checks.mbu_check("cuda", serving_fig(itl=(None, None)), 14e9, SERVE)[0]),
    ("mbu", "on a CPU", NOT_RUN, lambda: serving_checks.mbu_check("cpu", serving_fig(), 14e9, SERVE)[0]),
    ("peak_memory", "over preflight's estimate", FAIL,
     lambda: serving_checks.memory_check(21_000_000_000, None, SERVE)),
    ("peak_memory", "no estimate given", NOT_RUN,
     lambda: serving_checks.memory_check(1, None, Expect(**{**SERVE.__dict__, "expected_peak_bytes": None}))),
    ("cost_per_mtok", "no output measured", FAIL,
     lambda: serving_checks.cost_check(serving_fig(output=None), SERVE)[0]),
    ("cost_per_mtok", "informational", NOT_RUN,
     lambda: serving_checks.cost_check(serving_fig(), SERVE)[0]),
    # smoke job: the NVLink domains (validators/domain_checks.py, domain_phase.py)
    ("domain_allreduce_busbw", "a domain below the catalog's figure", FAIL,
     lambda: domain_checks.catalog_checks("domain_allreduce_busbw", {"a": (300.0, 72)}, 350.0, True, "ar")[0]),
    ("domain_allreduce_busbw", "no catalog figure (to be measured)", NOT_RUN,
     lambda: domain_checks.catalog_checks("domain_allreduce_busbw", {"a": (300.0, 72)}, None, True, "ar")[0]),
    ("domain_allreduce_busbw", "nothing measured", FAIL,
     lambda: domain_checks.catalog_checks("domain_allreduce_busbw", {"a": (None, 72)}, 350.0, True, "ar")[0]),
    ("domain_allreduce_busbw", "gloo on CPU", NOT_RUN,
     lambda: domain_checks.catalog_checks("domain_allreduce_busbw", {"a": (300.0, 8)}, 350.0, False, "ar")[0]),
    ("domain_alltoall_busbw", "a domain below the catalog's figure", FAIL,
     lambda: domain_checks.catalog_checks("domain_alltoall_busbw", {"a": (100.0, 72)}, 150.0, True, "a2a")[0]),
    ("domain_alltoall_busbw", "one rank in the domain", NOT_RUN,
     lambda: domain_checks.catalog_checks("domain_alltoall_busbw", {"a": (None, 1)}, 150.0, True, "a2a")[0]),
    ("domain_allreduce_peers", "a domain below 0.8 x its peers' median", FAIL,
     lambda: domain_checks.peer_checks("domain_allreduce_peers", {"b": 50.0, "a": 100.0, "c": 98.0}, "ar")[0]),
    ("domain_allreduce_peers", "one domain: nothing to compare", NOT_RUN,
     lambda: domain_checks.peer_checks("domain_allreduce_peers", {"a": 100.0}, "ar")[0]),
    ("domain_alltoall_peers", "a domain below 0.8 x its peers' median", FAIL,
     lambda: domain_checks.peer_checks("domain_alltoall_peers", {"b": 70.0, "a": 100.0}, "a2a")[0]),
    ("domain_alltoall_peers", "nothing measured in the domain", FAIL,
     lambda: domain_checks.peer_checks("domain_alltoall_peers", {"b": None, "a": 100.0}, "a2a")[0]),
    ("domain_link_peers", "a link below 0.8 x its peers' median", FAIL,
     lambda: domain_checks.peer_checks("domain_link_peers", {"c<->a": 5.0, "a<->b": 50.0, "b<->c": 48.0}, "p2p", "link")[0]),
    ("domain_link_peers", "one link: nothing to compare", NOT_RUN,
     lambda: domain_checks.peer_checks("domain_link_peers", {"a<->b": 50.0}, "p2p", "link")[0]),
    ("cross_domain_allreduce_busbw", "one domain", NOT_RUN,
     lambda: domain_checks.cross_check({}, 1, True)),
    ("cross_domain_allreduce_busbw", "a position group measured nothing", FAIL,
     lambda: domain_checks.cross_check({"position 0": 40.0, "position 1": None}, 2, True)),
    ("cross_domain_allreduce_busbw", "no catalog figure across domains", NOT_RUN,
     lambda: domain_checks.cross_check({"position 0": 40.0}, 2, True)),
    ("cross_domain_peers", "a position (a rail) below 0.8 x the others' median", FAIL,
     lambda: domain_checks.peer_checks("cross_domain_peers", {"position 3": 20.0, "position 0": 45.0, "position 1": 44.0}, "x", "position")[0]),
    ("cross_domain_peers", "one position: nothing to compare", NOT_RUN,
     lambda: domain_checks.peer_checks("cross_domain_peers", {"position 0": 45.0}, "x", "position")[0]),
    ("alltoall_busbw", "nothing measured", FAIL, lambda: domain_checks.alltoall_check(None, 8)),
    ("alltoall_busbw", "a backend without all-to-all", NOT_RUN,
     lambda: domain_checks.alltoall_check(None, 8, "gloo has no all-to-all here")),
    ("alltoall_busbw", "one rank", NOT_RUN, lambda: domain_checks.alltoall_check(1.0, 1)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "evidence", "verdict", "call"),
    CASES,
    ids=[f"{n}: {e}" for n, e, _, _ in CASES],
)
def test_failure_evidence_never_passes(name, evidence, verdict, call, monkeypatch, tmp_path):
    c = call(monkeypatch, tmp_path) if call.__code__.co_argcount == 2 else call()
    assert c.name == name
    assert c.status != PASS, f"{name} passed on: {evidence} ({c})"
    assert c.status == verdict, f"{name} on {evidence}: {c.status} ({c.detail})"
    assert c.detail, f"{name}: a verdict other than pass must say why"


def test_the_healthy_evidence_does_pass():
    """The cases above are not vacuous: the same functions pass on good evidence."""
    good = [
        nvml("nvml_gpu_count"),
        nvml("ecc_uncorrectable"),
        nvml("row_remap"),
        links("nvlink_up"),
        links("pcie_link"),
        fabric(),
        fabric_check(tray()),
        imex_check(IMEX_UP, ["10.40.1.11", "10.40.1.12"]),
        *domain_checks.catalog_checks(
            "domain_allreduce_busbw", {"a": (400.0, 72)}, 350.0, True, "ar"
        ),
        *domain_checks.peer_checks(
            "domain_link_peers", {"a<->b": 50.0, "b<->c": 48.0}, "p2p", "link"
        ),
        diag([("sw", "pass", "")]),
        *(smi(n) for n in ("gpu_count", "driver_branch", "ecc_uncorrectable", "row_remap")),
        serving.mount_check("/"),
        node_count(4, 4, ["a", "b", "c", "d"]),
        device("gpu_count", [gpus(8)], expect_gpus=8),
        device("gpu_model", [gpus(8)], expect_gpu_model="H100-SXM", expect_gpu_pattern=PATTERN),
        comm_checks.allreduce_verdict([point(470.0)], 8, True, 460.0),
        training("loss_drop", FALLING),
        training("mfu", FALLING, device=CUDA, timed=(20, 0.001)),
        replicas_verdict([["1.0", "2.0"], ["1.0", "2.0"]]),
        ckpt("checkpoint_roundtrip", [rank(), rank()]),
        ckpt("checkpoint_write", [rank(write=2.0)]),
        tier_check(
            {
                "url": "s3://b/p",
                "copies": [COPY],
                "errors": [],
                "unfinished": False,
                "newest": 10,
                "asked": 1,
            },
            60,
        ),
        nodes_tier_check({"a": node_tier("a"), "b": node_tier("b")}, 60),
        comm_checks.nccl_version_check("2.21.5", "2.21.5"),
        comm_checks.nccl_transport_check(transport("AWS Libfabric"), "efa", "log"),
        job(job_report({"ranks": 2, "world_size": 2})),
        serving_checks.shape_check(SERVE, SERVE.shape, False),
        serving_checks.generation_check(serving_fig(), SERVE_LOAD),
        *serving_checks.latency_checks(serving_fig(), SERVE),
        serving_checks.rate_checks(serving_fig(), SERVE_LOAD, SERVE)[1],
        serving_checks.mbu_check(
            "cuda", serving_fig(), 14e9, Expect(**{**SERVE.__dict__, "mbu_min_pct": 30.0})
        )[0],
        serving_checks.memory_check(19_000_000_000, None, SERVE),
    ]
    assert [c.name for c in good if c.status != PASS] == []


# ---------------------------------------------------------------- every check is audited


def test_every_check_has_failure_cases():
    # The same scan the documentation's checks reference is generated from.
    names = emitted_checks(VALIDATORS_DIR)
    # The scan finds the checks the issue lists (and the launcher's own).
    assert {"job_completed", "node_count", "nvml_gpu_count", "checkpoint_read"} <= names
    audited = {n for n, _, _, _ in CASES}
    assert names - audited == set(), "checks without a failure case in the audit"
    assert audited - names == set(), "cases for checks nothing emits"
