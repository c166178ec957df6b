"""The nvidia_driver role and a driver changed outside its run. Loaded and installed versions
that differ (an apt upgrade by someone else) are rebooted over SSH as under a local connection,
whether or not this run changed anything, or the next `nvidia-smi` fails with NVML's version
mismatch; and the driver's packages are held, so that an unattended upgrade cannot do that.

This machine has no GPU, no NVIDIA driver and cannot be rebooted: the role's own task files
run through ansible-playbook over localhost, fed the probe's facts (what a GPU host's probe
reports), with stand-ins for modinfo and dpkg on PATH. Over a local connection Ansible's reboot
action refuses before it does anything ("would reboot the control node"): reaching it is what
the role's reboot over SSH would do. The reboot itself, and the packages' real source names,
are for a GPU host (docs/operations/limits.md)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.action.reboot import ActionModule as RebootAction
from ansible.template import Templar, trust_as_template
from gpu_collection import ROLES_DIR
from local_play import output, play, recap

ROLE = ROLES_DIR / "nvidia_driver"
REFUSED = "with local connection would reboot the control node"

# What the probe reports on a GPU host whose driver 550.54.15 is loaded.
PROBE = {
    "gpus": [{"address": "0000:18:00.0", "device": "0x2330"}],
    "nvswitches": [],
    "loaded_version": "550.54.15",
    "nouveau_loaded": False,
    "installed": [],
    "installed_branches": ["550"],
    "decision": "install",
    "problem": "",
}


def _stand_in(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def _reboot_is_refused_locally() -> None:
    """Ansible's reboot action must refuse a local connection before it does anything: the test
    below reaches it on this machine."""
    if REFUSED not in inspect.getsource(RebootAction.run).replace("{0} ", ""):
        pytest.fail("this Ansible's reboot action does not refuse a local connection: not run")


def _install(tmp_path: Path, probe: dict, installed: str) -> object:
    """The role's install tasks on a host whose packages are already there (as after an
    upgrade by someone else: nothing for this run to install), over SSH as far as the role
    can tell, with the installed module's version `installed`."""
    _stand_in(tmp_path / "bin", "modinfo", f'echo "{installed}"\n')
    tasks = [
        {
            "name": "the role's install tasks",
            "ansible.builtin.include_role": {
                "name": "rackform.gpu.nvidia_driver",
                "tasks_from": "install",
            },
            "vars": {
                "_nvidia_driver_probe": probe,
                # The packages are there (nothing to install, blacklist or hold here) ...
                "_nvidia_driver_adopt": True,
                # ... and the role reaches the host as over SSH.
                "_nvidia_driver_local": False,
            },
        }
    ]
    return play(tmp_path, tasks, path=[tmp_path / "bin"], name="install")


def test_a_driver_upgraded_outside_the_run_is_rebooted_over_ssh(tmp_path):
    _reboot_is_refused_locally()
    done = _install(tmp_path, PROBE, installed="550.90.07")
    # The reboot was asked of Ansible (refused only because this is the control node) ...
    assert REFUSED in done.stdout, output(done)
    assert "Reboot for the NVIDIA driver" in done.stdout.split(REFUSED)[0].rsplit("TASK [", 1)[1]
    # ... and nothing after it ran: no nvidia-smi against a module of another version.
    assert "Ask nvidia-smi" not in done.stdout, output(done)


def _templar(**variables) -> Templar:
    loader = DataLoader()
    v = {
        **loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True),
        **loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True),
        **variables,
    }
    return Templar(loader=loader, variables=v)


def _reboot_task() -> dict:
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
    (task,) = [t for t in tasks if "ansible.builtin.reboot" in t]
    return task


def _reboots(probe: dict, installed: str, **variables) -> bool:
    """Whether install.yml's reboot runs, by its own `when`, after its own decision."""
    decide = [t for t in yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
              if "_nvidia_driver_reboot_needed" in t.get("ansible.builtin.set_fact", {})]  # fmt: skip
    facts = {"_nvidia_driver_probe": probe, "_nvidia_driver_modinfo": {"stdout": installed + "\n"}}
    base = {"ansible_check_mode": False, "_nvidia_driver_local": False, **facts, **variables}
    needed = _templar(**base).template(
        trust_as_template(decide[0]["ansible.builtin.set_fact"]["_nvidia_driver_reboot_needed"])
    )
    expr = trust_as_template("{{ " + _reboot_task()["when"].strip() + " }}")
    return _templar(**base, _nvidia_driver_reboot_needed=needed).template(expr) is True


def test_the_reboot_follows_the_hosts_state_not_this_runs_changes():
    # A task, not a handler: nothing this run changed has to notify it.
    handlers = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())
    assert not [h for h in handlers if "ansible.builtin.reboot" in h]
    assert _reboots(PROBE, "550.90.07")  # loaded 550.54.15, installed 550.90.07
    assert _reboots({**PROBE, "loaded_version": "", "nouveau_loaded": True}, "550.90.07")
    assert not _reboots(PROBE, "550.54.15")  # the installed one is loaded
    assert not _reboots({**PROBE, "loaded_version": ""}, "550.90.07")  # none loaded: modprobe
    # Told not to, in check mode, or under a local connection (tasks/reboot_local.yml asks).
    assert not _reboots(PROBE, "550.90.07", nvidia_driver_reboot=False)
    assert not _reboots(PROBE, "550.90.07", nvidia_driver_reboot="false")  # -e gives a string
    assert not _reboots(PROBE, "550.90.07", ansible_check_mode=True)
    assert not _reboots(PROBE, "550.90.07", _nvidia_driver_local=True)


# dpkg-query's answer on an Ubuntu GPU host (package, source package, status): the driver of
# branch 550 from its source package, one library already held, a package that only bears the
# name, one removed with its configuration left, and Fabric Manager.
ROWS = [
    ("nvidia-driver-550", "nvidia-graphics-drivers-550", "ii "),
    ("libnvidia-compute-550:amd64", "nvidia-graphics-drivers-550", "ii "),
    ("nvidia-dkms-550", "nvidia-graphics-drivers-550", "hi "),
    ("nvidia-container-toolkit", "nvidia-container-toolkit", "ii "),
    ("libnvidia-gl-535:amd64", "nvidia-graphics-drivers-535", "rc "),
    ("nvidia-fabricmanager-550", "nvidia-fabricmanager-550", "ii "),
]
DPKG_QUERY = "".join(" ".join(row) + "\\n" for row in ROWS)
DRIVER = [
    "libnvidia-compute-550:amd64",
    "nvidia-driver-550",
    "nvidia-dkms-550",
    "nvidia-fabricmanager-550",
]

# A stand-in for dpkg's selections, kept in a file: --get-selections NAME, --set-selections.
DPKG = """\
state={state}
touch "$state"
case "$1" in
  --get-selections)
    line=$(grep "^$2 " "$state" | tail -n 1)
    printf '%s\\t%s\\n' "$2" "${{line#* }}"
    [ -n "$line" ] || printf '%s\\tinstall\\n' "$2"
    ;;
  --set-selections) cat >> "$state"; echo >> "$state" ;;
  *) exit 2 ;;
esac
"""


def _hold(tmp_path: Path, args: tuple[str, ...] = (), **variables) -> object:
    bin_dir = tmp_path / "bin"
    _stand_in(bin_dir, "dpkg-query", f"printf '{DPKG_QUERY}'\n")
    _stand_in(bin_dir, "dpkg", DPKG.format(state=tmp_path / "selections"))
    tasks = [
        {
            "name": "the role's hold tasks",
            "ansible.builtin.include_role": {
                "name": "rackform.gpu.nvidia_driver",
                "tasks_from": "hold",
            },
            "vars": {
                "_nvidia_driver_packages": {"cuda_repo": ["nvidia-driver-550"], "distribution": []},
                **variables,
            },
        }
    ]
    return play(tmp_path, tasks, args=args, path=[bin_dir], name="hold")


def _selections(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "selections"
    lines = path.read_text().split() if path.exists() else []
    return dict(zip(lines[::2], lines[1::2], strict=True))


def test_the_drivers_packages_are_held_and_released_on_request(tmp_path):
    (tmp_path / "selections").write_text("nvidia-dkms-550 hold\n")  # dpkg-query's "hi"
    checked = _hold(tmp_path, args=("--check",))
    assert checked.returncode == 0, output(checked)
    assert recap(checked)["changed"] == 1  # it says it would hold them ...
    assert _selections(tmp_path) == {"nvidia-dkms-550": "hold"}  # ... and holds nothing

    done = _hold(tmp_path)
    assert done.returncode == 0, output(done)
    # The driver's own packages, not a package that only bears NVIDIA's name nor one removed.
    assert _selections(tmp_path) == dict.fromkeys(DRIVER, "hold")
    again = _hold(tmp_path)
    assert again.returncode == 0 and recap(again)["changed"] == 0, output(again)

    released = _hold(tmp_path, nvidia_driver_hold_packages="false")  # as -e gives it
    assert released.returncode == 0, output(released)
    assert _selections(tmp_path) == dict.fromkeys(DRIVER, "install")
