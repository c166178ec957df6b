"""The node's converge: the site playbook of the artifact's collection over `localhost`, in the
virtualenv, with the node group's variables, under Mitogen's strategies where the virtualenv
holds them, and with the tags a baked image already holds skipped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rackform.boot.node.log import log, run
from rackform.boot.node.virtualenv import VENV, has_pinned, venv

# Written by the nvidia_driver role (nvidia_driver_reboot_request_file) under a local
# connection when the new driver needs a reboot.
REBOOT_REQUEST = Path("/var/lib/rackform/reboot-requested")
# The site playbook of the rackform.gpu collection, by its name in the collection (Ansible finds
# it through ANSIBLE_COLLECTIONS_PATH, the artifact's collections/).
SITE = "rackform.gpu.site"


def inventory(
    spec: dict, reboot_request: Path = REBOOT_REQUEST, host_vars: dict | None = None
) -> dict:
    """The node as the one host of its group, with its own variables where the controller
    gave them (`host_vars`: its rack, its NVMe drives: the node's file, `report_to`)."""
    host = {
        **(host_vars or {}),
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "nvidia_driver_reboot_request_file": str(reboot_request),
    }
    return {
        "all": {
            "vars": spec["vars"],
            "children": {
                "gpu_nodes": {"children": {spec["group"]: {"hosts": {"localhost": host}}}}
            },
        }
    }


def configure(
    root: Path,
    spec: dict,
    reboot_request: Path = REBOOT_REQUEST,
    extra_env: dict | None = None,
    host_vars: dict | None = None,
) -> None:
    requirements = spec["pip"]["requirements"]
    if has_pinned(VENV / "bin" / "python", requirements):
        log(f"{VENV} has {', '.join(requirements)} (the node image's): pip not run")
    else:
        # --no-compile: what the node imports is byte-compiled on first import, and only that.
        pip = [*venv(), "-q", "--no-compile", *spec["pip"]["args"]]
        run([*pip, *requirements])
    inv = root / "inventory.json"
    inv.write_text(json.dumps(inventory(spec, reboot_request, host_vars)), encoding="utf-8")
    env = {
        "ANSIBLE_COLLECTIONS_PATH": str(root / "collections"),
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCAL_TEMP": str(root / ".ansible-tmp"),
        # The node is its own controller: each module runs from stdin rather than from a file
        # written, made executable and removed for it (three fewer processes a task), and the
        # controller's processes look at each other every 50 ms, not every 1 ms (Ansible's
        # INTERNAL_POLL_INTERVAL: "higher values are more suitable ... when CPU usage might be
        # a concern"), leaving the node's CPU to the modules. On a testbed VM under emulation
        # the roles' run took 569 s against 660 s.
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_INTERNAL_POLL_INTERVAL": "0.05",
    }
    strategy_env, strategy_args = strategy()
    playbook = [str(VENV / "bin" / "ansible-playbook"), "-i", str(inv), *strategy_args, SITE]
    run(playbook, env={**env, **strategy_env, **(extra_env or {})}, cwd=str(root))


def strategy(venv_root: Path = VENV) -> tuple[dict, list[str]]:
    """The environment and arguments that run the roles under Mitogen's strategies, where the
    virtualenv holds Mitogen (`node_requirements` installs it): the node's one Python interpreter
    runs every task's module, rather than a new one a task that imports Ansible's module code
    again (most of a task's time on a small or emulated CPU). Nothing where it does not: Ansible's
    own strategies, the same plays."""
    found = sorted(venv_root.glob("lib/python3*/site-packages/ansible_mitogen/plugins/strategy"))
    if not found:
        return {}, []
    env = {
        "ANSIBLE_STRATEGY_PLUGINS": str(found[-1]),
        "ANSIBLE_STRATEGY": "mitogen_linear",
        # Its timeout covers its interpreter's start too, as on the controller.
        "ANSIBLE_TIMEOUT": "30",
    }
    return env, ["-e", "rackform_free_strategy=mitogen_free"]


def image_env(root: Path, spec: dict) -> dict:
    """Where the blueprint bakes a node image: whether this node's image holds what the
    blueprint's roles install (the image check, shipped beside this script then); the tags it
    holds are skipped, and a mismatch is configured in full with a WARNING line."""
    if not spec.get("image"):
        return {}
    sys.path.insert(0, str(root))
    from image_check import ansible_env, check

    result = check(spec["image"])
    if result.warning:
        log(result.warning)
    elif result.skip:
        log(f"the node image holds {', '.join(result.skip)}: those tags are not run again")
    return ansible_env(result)
