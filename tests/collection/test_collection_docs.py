"""`ansible-doc` shows what the rackform.gpu collection holds, as a user reads it: every module's
documentation, with an option for each entry of the module's argument_spec (read from the
module's code, not its docs) and its return values; every role's argument spec. Run against the
collection the package ships (ANSIBLE_COLLECTIONS_PATH at the package, as rackform runs it)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from gpu_collection import COLLECTION, COLLECTIONS_ROOT, ROLES_DIR

BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py"))
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "tasks" / "main.yml").is_file())


def ansible_doc(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_ROOT), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [BIN / "ansible-doc", *args], capture_output=True, text=True, env=env, timeout=120
    )


def argument_spec(name: str) -> dict:
    """The argument_spec the module hands AnsibleModule, read from its source."""
    tree = ast.parse((COLLECTION / "plugins" / "modules" / f"{name}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "AnsibleModule":
            spec = next(k.value for k in node.keywords if k.arg == "argument_spec")
            return ast.literal_eval(spec)
    raise AssertionError(f"{name}: no AnsibleModule(argument_spec=...) call")


def test_the_collection_has_the_modules_and_roles_these_tests_cover():
    assert MODULES == ["nccl_rdma_probe", "nvidia_driver_probe", "nvme_raid_probe"]
    assert ROLES == [
        "dcgm", "host_bootstrap", "imex", "nccl_rdma", "nvidia_driver", "nvme_raid",
        "shared_storage", "slurm", "smoke_train",
    ]  # fmt: skip


def test_ansible_doc_lists_every_module_and_role():
    modules = ansible_doc("--list", "--json", "rackform.gpu")
    assert modules.returncode == 0, modules.stderr
    assert sorted(json.loads(modules.stdout)) == [f"rackform.gpu.{m}" for m in MODULES]
    roles = ansible_doc("--type", "role", "--list", "--json", "rackform.gpu")
    assert roles.returncode == 0, roles.stderr
    assert sorted(json.loads(roles.stdout)) == [f"rackform.gpu.{r}" for r in ROLES]


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_shows_each_module(name):
    fqcn = f"rackform.gpu.{name}"
    text = ansible_doc(fqcn)
    assert text.returncode == 0, text.stderr
    assert f"MODULE {fqcn} ({COLLECTION / 'plugins' / 'modules' / name}.py)" in text.stdout
    assert "[WARNING]" not in text.stderr, text.stderr
    doc = json.loads(ansible_doc("--json", fqcn).stdout)[fqcn]
    spec = argument_spec(name)
    options = doc["doc"].get("options") or {}
    assert set(options) == set(spec), f"{name}: documented options differ from its argument_spec"
    for option, rule in spec.items():
        assert options[option]["type"] == rule.get("type", "str"), option
        assert options[option].get("required", False) == rule.get("required", False), option
        assert options[option]["description"], option
        assert f"{option} " in text.stdout or f"{option}\n" in text.stdout, option
    assert doc["doc"]["short_description"] and doc["doc"]["description"]
    assert doc["return"], f"{name}: no RETURN values"
    for key in doc["return"]:
        assert key in text.stdout, key
    # The examples are tasks a user can paste: YAML, calling the module by its FQCN.
    examples = yaml.safe_load(doc["examples"])
    assert any(fqcn in task for task in examples), doc["examples"]


@pytest.mark.parametrize("role", ROLES)
def test_ansible_doc_shows_each_roles_argument_spec(role):
    fqcn = f"rackform.gpu.{role}"
    text = ansible_doc("--type", "role", fqcn)
    assert text.returncode == 0, text.stderr
    # Names are shown bold, or between asterisks without colour.
    assert re.search(
        rf"ROLE: \*?{re.escape(fqcn)}\*? \({re.escape(str(COLLECTION))}\)", text.stdout
    )
    assert re.search(r"ENTRY POINT: \*?main\*? - \w", text.stdout), text.stdout
    shown = json.loads(ansible_doc("--type", "role", "--json", fqcn).stdout)[fqcn]
    spec = yaml.safe_load((ROLES_DIR / role / "meta" / "argument_specs.yml").read_text())
    main = spec["argument_specs"]["main"]
    assert set(shown["entry_points"]) == {"main"}
    documented = shown["entry_points"]["main"].get("options") or {}
    assert set(documented) == set(main.get("options") or {}), role
    for option in documented:
        assert option in text.stdout, option
