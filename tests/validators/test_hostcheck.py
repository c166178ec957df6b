"""Host checks: NVML, `dcgmi diag` and the storage ceiling.

There is no GPU, NVIDIA driver or DCGM on this machine. NVML is therefore exercised twice:
for real (the library is missing here, which must fail a node that should have GPUs) and
through `FakeNvml` below, which stands in for the driver with pynvml's call signatures. dcgmi
is a recording fake on PATH that prints documents in the two JSON shapes DCGM writes. fio and
the O_DIRECT writer run for real against a temporary directory."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest
from smoke_helpers import MOUNTS, ROOT, FakeNvml, env, isolated

from validators import hostcheck, storage
from validators.report import FAIL, NOT_RUN, PASS

# ---------------------------------------------------------------- NVML


def by_name(checks):
    return {c.name: c for c in checks}


def test_healthy_gpus_pass():
    nv = FakeNvml()
    c = by_name(hostcheck.nvml_checks(nv, 8))
    assert [c[n].status for n in ("nvml_gpu_count", "ecc_uncorrectable", "row_remap")] == [PASS] * 3
    assert nv.calls == ["init", "shutdown"]


def test_a_missing_gpu_fails():
    c = by_name(hostcheck.nvml_checks(FakeNvml(gpus=7), 8))
    assert c["nvml_gpu_count"].status == FAIL
    assert (c["nvml_gpu_count"].measured, c["nvml_gpu_count"].expected) == (7, 8)


def test_uncorrectable_ecc_fails_naming_the_gpu():
    c = by_name(hostcheck.nvml_checks(FakeNvml(ecc={5: 2}), 8))["ecc_uncorrectable"]
    assert c.status == FAIL and c.measured == 2 and "GPU 5: 2" in c.detail


@pytest.mark.parametrize(
    ("state", "words"),
    [((True, False), "remap pending (reset the GPU)"), ((False, True), "remap failed")],
)
def test_pending_or_failed_row_remap_fails(state, words):
    c = by_name(hostcheck.nvml_checks(FakeNvml(remap={3: state}), 8))["row_remap"]
    assert c.status == FAIL and f"GPU 3: {words}" in c.detail


def test_unsupported_counters_are_not_run_not_passed():
    c = by_name(hostcheck.nvml_checks(FakeNvml(ecc_supported=False, remap_supported=False), 8))
    assert c["ecc_uncorrectable"].status == NOT_RUN
    assert c["row_remap"].status == NOT_RUN


def test_real_nvml_here_no_driver():
    # nvidia-ml-py is installed here but there is no libnvidia-ml: a GPU node would fail.
    import pynvml

    expect_gpus = by_name(hostcheck.nvml_checks(pynvml, 8))
    assert expect_gpus["nvml_gpu_count"].status == FAIL
    assert "is the NVIDIA driver installed?" in expect_gpus["nvml_gpu_count"].detail
    assert expect_gpus["ecc_uncorrectable"].status == NOT_RUN
    none_expected = hostcheck.nvml_checks(pynvml, None)
    assert {c.status for c in none_expected} == {NOT_RUN}
    assert {c.status for c in hostcheck.nvml_checks(None, 0)} == {NOT_RUN}


# ---------------------------------------------------------------- dcgmi

# DCGM 3.x: tests in categories under "DCGM GPU Diagnostic", statuses capitalised.
DCGM3 = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [
                    {"name": "Denylist", "results": [{"gpu_ids": "0,1", "status": "Pass"}]},
                    {"name": "NVML Library", "results": [{"gpu_ids": "0,1", "status": "Pass"}]},
                ],
            },
            {
                "category": "Integration",
                "tests": [{"name": "PCIe", "results": [{"gpu_ids": "0,1", "status": "Skip"}]}],
            },
        ],
        "version": "3.3.9",
    }
}
# DCGM 4.x: "DCGM Diagnostic", one result per entity, warnings carry the reason.
DCGM4_FAIL = {
    "DCGM Diagnostic": {
        "test_categories": [
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "memory",
                        "results": [
                            {"entity_group": "GPU", "entity_id": 0, "status": "Pass"},
                            {
                                "entity_group": "GPU",
                                "entity_id": 1,
                                "status": "Fail",
                                "warnings": [{"warning": "Uncorrectable ECC error on GPU 1"}],
                            },
                        ],
                    }
                ],
            }
        ]
    },
    "metadata": {"version": "4.2.3"},
}


def test_parse_both_shapes_and_banner():
    r3 = hostcheck.parse_diag("Successfully ran diagnostic for group.\n" + json.dumps(DCGM3))
    assert r3 == [("Denylist", "pass", ""), ("NVML Library", "pass", ""), ("PCIe", "skip", "")]
    r4 = hostcheck.parse_diag(json.dumps(DCGM4_FAIL))
    assert ("memory", "fail", "Uncorrectable ECC error on GPU 1") in r4
    assert hostcheck.parse_diag("Error: unable to connect to host engine") is None
    assert hostcheck.parse_diag("{not json") is None


def test_verdicts():
    exp = "no failures at r1"
    ok = hostcheck.diag_verdict(hostcheck.parse_diag(json.dumps(DCGM3)), exp)
    assert ok.status == PASS and ok.measured == "2 pass, 0 fail, 1 other"
    bad = hostcheck.diag_verdict(hostcheck.parse_diag(json.dumps(DCGM4_FAIL)), exp)
    assert bad.status == FAIL and "memory: Uncorrectable ECC error on GPU 1" in bad.detail
    odd = hostcheck.diag_verdict([("pcie", "unknown", ""), ("sw", "pass", "")], exp)
    assert odd.status == FAIL and "unrecognised status for pcie" in odd.detail
    skipped = hostcheck.diag_verdict([("pcie", "skip", "")], exp)
    assert skipped.status == NOT_RUN  # nothing passed: never reported as a pass
    warned = hostcheck.diag_verdict([("sw", "warn", ""), ("pcie", "pass", "")], exp)
    assert warned.status == PASS and "warnings: sw" in warned.detail


@pytest.fixture
def fake_dcgmi(tmp_path, monkeypatch):
    """A recording `dcgmi` on PATH: logs its arguments, prints DOC, exits RC."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "dcgmi.args"
    doc = tmp_path / "doc.json"
    script = bindir / "dcgmi"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {log}
        [ -n "$FAKE_DCGMI_SLEEP" ] && sleep "$FAKE_DCGMI_SLEEP"
        cat {doc}
        exit "${{FAKE_DCGMI_RC:-0}}"
        """)
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")

    def set_doc(text: str, rc: int = 0):
        doc.write_text(text)
        monkeypatch.setenv("FAKE_DCGMI_RC", str(rc))
        return log

    return set_doc


def test_dcgm_check_runs_the_level_asked(fake_dcgmi):
    log = fake_dcgmi(json.dumps(DCGM3))
    c = hostcheck.dcgm_check(2)
    assert c.status == PASS and c.expected == "no failures at r2"
    assert log.read_text().split() == ["diag", "-r", "2", "-j"]


def test_dcgm_failure_and_unusable_output(fake_dcgmi):
    fake_dcgmi(json.dumps(DCGM4_FAIL), rc=226)
    assert hostcheck.dcgm_check(1).status == FAIL
    fake_dcgmi("Error: unable to establish a connection to the host engine", rc=1)
    c = hostcheck.dcgm_check(1)
    assert c.status == FAIL and "exited 1 without results" in c.detail


def test_dcgm_hang_is_bounded(fake_dcgmi, monkeypatch):
    fake_dcgmi(json.dumps(DCGM3))
    monkeypatch.setenv("FAKE_DCGMI_SLEEP", "30")
    monkeypatch.setitem(hostcheck.DCGM_TIMEOUT_S, 1, 1)
    c = hostcheck.dcgm_check(1)
    assert c.status == FAIL and "did not finish in 1 s" in c.detail


def test_no_dcgmi_is_not_run(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hostcheck.dcgm_check(1).status == NOT_RUN


# ---------------------------------------------------------------- storage


def test_python_direct_write(tmp_path):
    c = storage.measure(str(tmp_path), 16, use_fio=False)
    assert c.error is None and c.gbps > 0
    assert "O_DIRECT" in c.method or "buffered" in c.method
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


def test_a_filesystem_that_makes_the_file_then_refuses_o_direct(tmp_path, monkeypatch):
    # tmpfs before Linux 6.6 (the testbed's Debian 12 kernel) creates the file, then answers
    # EINVAL to O_DIRECT; the retry without it must not find its own file in the way (it did:
    # "[Errno 17] File exists" on the testbed). This machine's kernel takes O_DIRECT on tmpfs,
    # so that open is played here.
    real_open = os.open

    def old_tmpfs(path, flags, *args, **kw):
        if flags & os.O_DIRECT:
            os.close(real_open(path, flags & ~os.O_DIRECT, *args, **kw))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(storage.os, "open", old_tmpfs)
    c = storage.measure(str(tmp_path), 4, use_fio=False)
    assert c.error is None and c.gbps > 0, c
    assert "buffered + fsync (no O_DIRECT here)" in c.method
    f = storage.DirectFile(str(tmp_path / "f"), storage.Blocks(1 << 20), exclusive=True)
    f.write(b"x" * 100)
    f.close()
    assert f.direct is False and (tmp_path / "f").read_bytes() == b"x" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # the probe file is gone


@pytest.mark.skipif(
    shutil.which("fio") is None, reason="fio not installed (scripts/setup.sh --test)"
)
def test_fio_write(tmp_path):
    c = storage.measure(str(tmp_path), 16, jobs=2)
    assert c.error is None and c.gbps > 0 and c.method.startswith("fio, 2 jobs")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(
    shutil.which("fio") is None, reason="fio not installed (scripts/setup.sh --test)"
)
def test_the_probe_writes_through_no_link_placed_in_the_mount(tmp_path):
    # A checkpoint mount every user may write to (1777, as the DLAMI's): links planted at the
    # names fio's files take (its job name, from the pid) must not send root's writes through
    # to a file of root's (one at least as large as a job's share, which fio writes in place).
    shadow = tmp_path / "disk.img"
    shadow.write_bytes(b"\x5a" * (8 << 20))
    mount = tmp_path / "ck"
    mount.mkdir()
    os.chmod(mount, 0o1777)
    links = [mount / f".rackform-ceiling-{os.getpid()}.{job}.0" for job in range(2)]
    for link in links:
        link.symlink_to(shadow)
    c = storage.measure(str(mount), 16, jobs=2)
    assert c.error is None and c.gbps > 0, c
    assert shadow.read_bytes() == b"\x5a" * (8 << 20)
    assert sorted(mount.iterdir()) == links  # the probe's own directory is gone


def test_storage_check_thresholds(tmp_path):
    assert hostcheck.storage_check(str(tmp_path), 8, 1e6).status == FAIL  # 1 PB/s: never
    assert hostcheck.storage_check(str(tmp_path), 8, None).status == NOT_RUN
    missing = hostcheck.storage_check(str(tmp_path / "nope"), 8, 1.0)
    assert missing.status == FAIL and "does not exist" in missing.detail
    assert hostcheck.storage_check(str(tmp_path), 0, 1.0).status == NOT_RUN


def test_mount_check(tmp_path):
    assert hostcheck.mount_check("/").status == PASS
    plain = hostcheck.mount_check(str(tmp_path))
    assert plain.status == FAIL and "not a mounted filesystem" in plain.detail
    assert hostcheck.mount_check(str(tmp_path / "nope")).status == FAIL
    assert hostcheck.mount_check(None).status == NOT_RUN


def test_mount_point_read_from_the_mount_table(tmp_path):
    d = tmp_path / "check points"
    d.mkdir()
    info = tmp_path / "mountinfo"
    escaped = str(d).replace(" ", "\\040")
    info.write_text(f"36 35 9:127 / {escaped} rw,noatime shared:1 - xfs /dev/md127 rw\n")
    assert hostcheck.is_mount_point(str(d), str(info))
    assert not hostcheck.is_mount_point(str(tmp_path), str(info))
    assert hostcheck.is_mount_point("/", str(tmp_path / "no-table"))  # falls back to ismount


@pytest.mark.skipif(not MOUNTS, reason="no private mount namespace can be made here")
def test_bind_mount_from_the_same_filesystem_is_a_mount_point(tmp_path):
    """os.path.ismount says no to a bind mount from the same filesystem (same device); the
    check must not fail a checkpoint path bound from the array's mount."""
    code = (
        "import os, sys; from validators.hostcheck import mount_check;"
        "print(os.path.ismount(sys.argv[1]), mount_check(sys.argv[1]).status)"
    )
    r = subprocess.run(
        [*isolated(f"mount --bind {tmp_path} {tmp_path}"), sys.executable, "-c", code, tmp_path],
        capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", PASS]


def test_command_line(tmp_path):
    out = tmp_path / "host.json"
    cmd = [sys.executable, "-m", "validators.hostcheck", "--json", str(out), "--expect-gpus", "8"]
    cmd += ["--storage-dir", str(tmp_path), "--storage-probe-mb", "8"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60)
    assert r.returncode == 1, r.stderr  # 8 GPUs expected, no driver here
    doc = json.loads(out.read_text())
    names = [c["name"] for c in doc["checks"]]
    assert names == [
        "nvml_gpu_count",
        "ecc_uncorrectable",
        "row_remap",
        "nvlink_up",
        "pcie_link",
        "fabric_manager",
        "dcgm_diag",
        "checkpoint_mount",
        "storage_write_ceiling",
    ]
    assert "nvml_gpu_count" in r.stdout and "FAILED" in r.stdout


def _md(tmp_path, state="clean", faulty=(), degraded=None):
    md = tmp_path / "sys" / "block" / "md127" / "md"
    md.mkdir(parents=True)
    (md / "array_state").write_text(state + "\n")
    for dev in ("nvme0n1", "nvme1n1"):
        (md / f"dev-{dev}").mkdir()
        (md / f"dev-{dev}" / "state").write_text(("faulty" if dev in faulty else "in_sync") + "\n")
    if degraded is not None:
        (md / "degraded").write_text(f"{degraded}\n")
    return str(tmp_path / "sys")


def test_md_health_names_a_broken_or_degraded_array(tmp_path):
    assert hostcheck.md_health("/dev/md127", _md(tmp_path / "ok")) == ""
    broken = hostcheck.md_health("/dev/md127", _md(tmp_path / "b", "broken", faulty=("nvme1n1",)))
    assert broken == "/dev/md127: array state broken; failed member(s) /dev/nvme1n1"
    degraded = hostcheck.md_health("/dev/md127", _md(tmp_path / "d", degraded=1))
    assert degraded == "/dev/md127: degraded: 1 member(s) missing"
    assert hostcheck.md_health("/dev/vda", str(tmp_path / "ok" / "sys")) == ""


def test_mount_source_reads_the_mount_table(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text(
        "29 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "40 29 9:127 / /mnt/check\\040points rw,noatime shared:2 - xfs /dev/md127 rw\n"
    )
    assert hostcheck.mount_source("/mnt/check points", str(table)) == "/dev/md127"
    assert hostcheck.mount_source("/srv", str(table)) == ""


def test_checkpoint_mount_fails_on_an_unhealthy_array(tmp_path, monkeypatch):
    # The mount is there and answers, but the array under it lost a member.
    monkeypatch.setattr(hostcheck, "is_mount_point", lambda d: True)
    monkeypatch.setattr(hostcheck, "mount_source", lambda d: "/dev/md127")
    sys_root = _md(tmp_path, "broken", faulty=("nvme0n1",))
    real = hostcheck.md_health
    monkeypatch.setattr(hostcheck, "md_health", lambda dev: real(dev, sys_root))
    c = hostcheck.mount_check(str(tmp_path))
    assert c.status == FAIL and "not healthy" in c.detail and "/dev/nvme0n1" in c.detail


def test_a_read_only_mount_is_read_from_the_mount_table(tmp_path):
    info = tmp_path / "mountinfo"
    rows = {
        "/mnt/ck-a": "rw,noatime - xfs /dev/md127 rw,attr2",
        "/mnt/ck-b": "ro,noatime - xfs /dev/md127 ro,attr2",  # mounted read-only
        "/mnt/ck-c": "rw,noatime - ext4 /dev/md1 ro,errors=remount-ro",  # remounted after EIO
        "/mnt/ck-d": "rw,noatime - ext4 /dev/md2 rw,errors=remount-ro",  # only the policy
    }
    info.write_text("".join(f"3{i} 1 9:1 / {m} {o}\n" for i, (m, o) in enumerate(rows.items())))
    assert [hostcheck.read_only(m, str(info)) for m in rows] == [False, True, True, False]
    assert hostcheck.mount_source("/mnt/ck-c", str(info)) == "/dev/md1"
    assert not hostcheck.read_only("/mnt/elsewhere", str(info))


@pytest.mark.skipif(not MOUNTS, reason="no private mount namespace can be made here")
def test_a_read_only_checkpoint_filesystem_fails_two_checks_and_crashes_nothing(tmp_path):
    """What a rolling change's canary met on the VMs: the host checks crashed (unlink of the
    probe file on a read-only filesystem raises EROFS even for a file never made). Now the
    mount check says read-only, the storage probe (fio or Python) says why it could not write,
    and the report is written."""
    ck, out = tmp_path / "ck", tmp_path / "host.json"
    ck.mkdir()
    code = (
        "import sys; from validators import storage;"
        "print(storage.measure(sys.argv[1], 8, use_fio=False).error)"
    )
    ro = f"mount --bind {ck} {ck} && mount -o remount,ro,bind {ck}"
    py = subprocess.run([*isolated(ro), sys.executable, "-c", code, ck], capture_output=True,
                        text=True, env=env(), cwd=ROOT, timeout=60)  # fmt: skip
    assert py.returncode == 0, py.stderr
    assert py.stdout.strip() == f"write to {ck} failed: [Errno 30] Read-only file system"
    cmd = [sys.executable, "-m", "validators.hostcheck", "--json", str(out), "--no-table",
           "--expect-mount", str(ck), "--storage-dir", str(ck), "--storage-probe-mb", "8"]  # fmt: skip
    r = subprocess.run([*isolated(ro), *cmd], capture_output=True, text=True, env=env(),
                       cwd=ROOT, timeout=60)  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    by = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    assert by["checkpoint_mount"]["status"] == FAIL
    assert by["checkpoint_mount"]["detail"].startswith(f"{ck} is mounted read-only")
    assert by["storage_write_ceiling"]["status"] == FAIL
    assert "Read-only file system" in by["storage_write_ceiling"]["detail"]
