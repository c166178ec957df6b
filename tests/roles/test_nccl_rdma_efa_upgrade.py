"""The nccl_rdma role's EFA installer across versions: a new nccl_rdma_efa_installer_version is
downloaded, unpacked and run (never the old installer again under the new version's marker),
the marker is written only once that installer succeeded, and going back to an earlier version
runs it again. Real ansible-playbook over localhost runs the role's own installer tasks
(tasks/efa_installer.yml) with a stand-in installer tarball served from a file:// URL and the
installer directory in a temporary one; the stand-in logs each run (this machine has no EFA)."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from local_play import output, play, recap

INSTALLER = """\
#!/bin/sh
# A stand-in for aws-efa-installer {version}: it says it ran, with its arguments.
echo "{version} $*" >> {log}
# A failure that passes (a held apt lock, a mirror down): the first run after {fail} appears.
if [ -e {fail} ]; then rm -f {fail}; exit 3; fi
"""


def _tarball(where: Path, version: str, log: Path, fail: Path) -> Path:
    """aws-efa-installer-<version>.tar.gz as AWS lays it out: aws-efa-installer/efa_installer.sh."""
    script = INSTALLER.format(version=version, log=log, fail=fail).encode()
    path = where / f"aws-efa-installer-{version}.tar.gz"
    # The same installer gives the same bytes (as a mirror's file does): no time in the header.
    with gzip.GzipFile(path, "wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data, mode in (
            ("aws-efa-installer", None, 0o755),
            ("aws-efa-installer/efa_installer.sh", script, 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def _install(tmp_path: Path, version: str, args: tuple[str, ...] = ()):
    served = tmp_path / "served"
    served.mkdir(exist_ok=True)
    tarball = _tarball(served, version, tmp_path / "ran.log", tmp_path / "fail-once")
    tasks = [
        {
            "name": "the role's EFA installer tasks",
            "ansible.builtin.include_role": {
                "name": "rackform.gpu.nccl_rdma",
                "tasks_from": "efa_installer",
            },
            # Task variables: above the role's own vars/main.yml, where its directory is.
            "vars": {
                "_nccl_rdma_efa_dir": str(tmp_path / "efa"),
                "nccl_rdma_efa_installer_version": version,
                "nccl_rdma_efa_installer_url": tarball.as_uri(),
                "nccl_rdma_efa_installer_sha256": "",
            },
        }
    ]
    return play(tmp_path, tasks, args=args, name=f"efa-{version}")


def _ran(tmp_path: Path) -> list[str]:
    log = tmp_path / "ran.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_new_installer_version_is_unpacked_and_run(tmp_path):
    efa = tmp_path / "efa"
    first = _install(tmp_path, "1.40.0")
    assert first.returncode == 0, output(first)
    assert _ran(tmp_path) == ["1.40.0 -y"]
    assert (efa / "installed-1.40.0").exists()

    again = _install(tmp_path, "1.40.0")
    assert again.returncode == 0, output(again)
    assert recap(again)["changed"] == 0, output(again)
    assert _ran(tmp_path) == ["1.40.0 -y"]  # installed: not run again

    upgrade = _install(tmp_path, "1.41.0")
    assert upgrade.returncode == 0, output(upgrade)
    # The new version's own installer ran (not the old one under the new marker).
    assert _ran(tmp_path) == ["1.40.0 -y", "1.41.0 -y"]
    assert (efa / "installed-1.41.0").exists()
    # Nothing of the old version is left: its marker would skip a return to it.
    assert sorted(p.name for p in efa.iterdir() if "1.40.0" in p.name) == []

    back = _install(tmp_path, "1.40.0")
    assert back.returncode == 0, output(back)
    assert _ran(tmp_path)[-1] == "1.40.0 -y"  # going back runs that installer again


def test_check_mode_changes_nothing_and_the_marker_follows_success(tmp_path):
    efa = tmp_path / "efa"
    assert _install(tmp_path, "1.40.0").returncode == 0
    before = sorted(p.name for p in efa.iterdir())
    checked = _install(tmp_path, "1.41.0", args=("--check",))
    assert checked.returncode == 0, output(checked)
    assert recap(checked)["changed"] > 0  # it says it would install 1.41.0
    assert _ran(tmp_path) == ["1.40.0 -y"]
    assert sorted(p.name for p in efa.iterdir()) == before

    (tmp_path / "fail-once").touch()
    broken = _install(tmp_path, "1.41.0")
    assert broken.returncode != 0
    assert _ran(tmp_path) == ["1.40.0 -y", "1.41.0 -y"]
    assert not (efa / "installed-1.41.0").exists()
    # A failed upgrade leaves the installed version's marker: nothing claims 1.41.0 is there.
    assert (efa / "installed-1.40.0").exists()
    fixed = _install(tmp_path, "1.41.0")  # the same installer, run again
    assert fixed.returncode == 0, output(fixed)
    assert _ran(tmp_path)[-1] == "1.41.0 -y"
    assert (efa / "installed-1.41.0").exists() and not (efa / "installed-1.40.0").exists()
