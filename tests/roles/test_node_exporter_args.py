"""The dcgm role's node_exporter arguments (/etc/default/prometheus-node-exporter, rendered by
Ansible's templar from the role's defaults), run by the package the role installs (Debian's
prometheus-node-exporter, installed here by scripts/setup.sh --test) on loopback, its
filesystem collector reading a stand-in mount table (`--path.procfs`, `--path.rootfs`): the
checkpoint array at the blueprint's default mount, /mnt/checkpoints, remounted read-only, is
exported as `node_filesystem_readonly`, which heal reads. With the package's own defaults it
is not: Debian's node_exporter leaves out every mount point under /mnt."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from gpu_collection import ROLES_DIR
from loopback import free_port

ROLE = ROLES_DIR / "dcgm"
MOUNT = "/mnt/checkpoints"


def role_args(**variables) -> list[str]:
    """ARGS as the node's systemd unit passes it: `$ARGS`, split on whitespace."""
    loader = DataLoader()
    v = {
        **loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True),
        "ansible_managed": "Ansible managed",
        **variables,
    }
    text = (ROLE / "templates" / "prometheus-node-exporter.default.j2").read_text()
    rendered = Templar(loader=loader, variables=v).template(trust_as_template(text))
    (line,) = [ln for ln in rendered.splitlines() if ln.startswith("ARGS=")]
    (value,) = shlex.split(line.removeprefix("ARGS="))  # the quotes, as systemd reads them
    return value.split()


@contextmanager
def exporter(args: list[str], tmp_path: Path):
    binary = shutil.which("prometheus-node-exporter")
    if binary is None:
        pytest.fail("prometheus-node-exporter is not installed: run scripts/setup.sh --test")
    # The node's mount table: the array read-only at the default mount, the root read-write.
    proc_dir, root = tmp_path / "proc", tmp_path / "root"
    (proc_dir / "1").mkdir(parents=True)
    (proc_dir / "1" / "mounts").write_text(
        f"/dev/md127 {MOUNT} xfs ro,relatime 0 0\n/dev/vda1 / ext4 rw,relatime 0 0\n"
    )
    (root / MOUNT.lstrip("/")).mkdir(parents=True)
    port = int(args[0].rpartition(":")[2])
    argv = [binary, *args, f"--path.procfs={proc_dir}", f"--path.rootfs={root}"]
    log = (tmp_path / "exporter.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        end = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    metrics = r.read().decode()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > end:
                    pytest.fail(f"node_exporter: {(tmp_path / 'exporter.log').read_text()}")
                time.sleep(0.2)
        yield metrics
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def readonly(metrics: str) -> list[str]:
    return [ln for ln in metrics.splitlines() if ln.startswith("node_filesystem_readonly{")]


def test_the_roles_arguments_export_the_read_only_checkpoint_array(tmp_path):
    args = role_args(
        dcgm_node_exporter_listen_address="127.0.0.1", dcgm_node_exporter_port=free_port()
    )
    assert args[0].startswith("--web.listen-address=127.0.0.1:")
    assert "--collector.textfile.directory=/var/lib/prometheus/node-exporter" in args
    with exporter(args, tmp_path) as metrics:
        found = readonly(metrics)
    assert any(f'mountpoint="{MOUNT}"' in ln and ln.endswith(" 1") for ln in found), found


def test_the_packages_own_defaults_would_hide_it(tmp_path):
    # What the role's exclusion is for: the package's default leaves /mnt out.
    args = [f"--web.listen-address=127.0.0.1:{free_port()}"]
    with exporter(args, tmp_path) as metrics:
        assert not [ln for ln in readonly(metrics) if MOUNT in ln]
