"""Helpers for the smoke tests (tests/validators, tests/cli/test_smoke_cmd.py): run the job and
the host checks as a node would (the collection's validators/ on PYTHONPATH), isolated from the
network and, where asked, with a private mount."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from rackform.paths import validators_dir

# The directory holding validators/ (in the rackform.gpu collection's smoke_train files): on
# PYTHONPATH and the working directory, as on a node.
ROOT = validators_dir().parent

# The tiny models in these tests train faster on one thread, and the suite shares 2 cores with
# the torchrun workers some tests start.
torch.set_num_threads(1)


@contextlib.contextmanager
def one_rank_group():
    """A real one-rank gloo process group (an in-process store, so nothing listens). Test
    modules wrap it in their own fixture: a conftest.py here would shadow the suite's."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [e.get("PYTHONPATH")])])
    e["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's pairs on loopback only
    return e


def torchrun(
    *job_args: str,
    nproc: int = 2,
    timeout: float = 120,
    prefix: list[str] | None = None,
    environ: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """The smoke job under torchrun on loopback, as the launcher runs it (no restarts);
    `environ` replaces env()."""
    cmd = [
        *(prefix or isolated()),
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--max-restarts=0",
        "-m",
        "validators.smoke",
        *job_args,
    ]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ or env(),
        cwd=ROOT,
        check=False,
    )


def _works(*unshare_args: str, probe: str) -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(
        ["unshare", *unshare_args, "sh", "-c", probe], capture_output=True, check=False
    )
    return r.returncode == 0


# A private network namespace holds only a loopback interface, so whatever torchrun's store
# and gloo listen on is reachable from this machine alone. Needs root (CAP_SYS_ADMIN).
NETNS = shutil.which("ip") is not None and _works("-n", probe="ip link set lo up")
with tempfile.TemporaryDirectory() as _d:
    MOUNTS = _works("-m", probe=f"mount -t tmpfs -o size=4k tmpfs {_d} && umount {_d}")


def isolated(mount: str | None = None) -> list[str]:
    """A command prefix: run in a private network namespace (loopback only) where one can be
    made, and with `mount` (a shell command, e.g. a read-only bind) in a private mount
    namespace: the mount is never visible outside and is gone when the command ends."""
    flags = (["-n"] if NETNS else []) + (["-m"] if mount else [])
    steps = (["ip link set lo up"] if NETNS else []) + ([mount] if mount else [])
    if not flags:
        return []
    return ["unshare", *flags, "sh", "-c", " && ".join([*steps, 'exec "$@"']), "sh"]


def env_without_numpy(tmp: Path) -> dict[str, str]:
    """env() for a Python in which numpy cannot be imported, without uninstalling it: a
    sitecustomize.py first on PYTHONPATH (Python imports it at start-up, in every process the
    command starts) puts None in sys.modules['numpy'], so `import numpy` fails as if it were
    not installed, and torch, importing fine, says "Numpy is not available" when a collective
    needs it."""
    site = tmp / "numpy-missing"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['numpy'] = None\n")
    e = env()
    e["PYTHONPATH"] = os.pathsep.join([str(site), e["PYTHONPATH"]])
    return e


class FakeNvml:
    """Stands in for pynvml on a machine with no NVIDIA driver (same names, same errors)."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    class NVMLError_InvalidArgument(NVMLError):
        pass

    NVML_NVLINK_MAX_LINKS = 18

    def __init__(
        self,
        gpus=8,
        ecc=None,
        remap=None,
        ecc_supported=True,
        remap_supported=True,
        lost=(),
        nvlinks=None,
        pcie=None,
    ):
        """`nvlinks`: GPU -> each link's state (1 up, 0 down; links past the list are not
        supported), none: every NVLink query NotSupported (as on a VM of one GPU). `pcie`: GPU
        -> (current width, max width, max generation, the GPU's own max generation), default
        x16 of x16, gen 5 of 5."""
        self.nvlinks, self.pcie = nvlinks or {}, pcie or {}
        self.gpus, self.ecc, self.remap = gpus, ecc or {}, remap or {}
        self.ecc_supported, self.remap_supported = ecc_supported, remap_supported
        self.lost = set(lost)  # GPUs that answer every query with NVMLError_GpuIsLost
        self.calls: list[str] = []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        assert (kind, counter) == (1, 0)  # uncorrectable, volatile
        if h in self.lost:
            raise self.NVMLError_GpuIsLost("GPU is lost")
        if not self.ecc_supported:
            raise self.NVMLError_NotSupported()
        return self.ecc.get(h, 0)

    def nvmlDeviceGetRemappedRows(self, h):
        if h in self.lost:
            raise self.NVMLError_GpuIsLost("GPU is lost")
        if not self.remap_supported:
            raise self.NVMLError_NotSupported()
        return (0, 0, *self.remap.get(h, (False, False)))

    def nvmlDeviceGetNvLinkState(self, h, link):
        if h in self.lost:
            raise self.NVMLError_GpuIsLost("GPU is lost")
        states = self.nvlinks.get(h, [])
        if link >= len(states):
            raise self.NVMLError_NotSupported("Not Supported")
        return states[link]

    def _pcie(self, h, i):
        if h in self.lost:
            raise self.NVMLError_GpuIsLost("GPU is lost")
        return self.pcie.get(h, (16, 16, 5, 5))[i]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._pcie(h, 0)

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._pcie(h, 1)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._pcie(h, 2)

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return self._pcie(h, 3)
