"""Static rules every role keeps: typed and documented variables that match the defaults and the
README, private variables prefixed, FQCN modules, no ignore_errors or placeholder asserts,
guarded commands, handlers that skip in check mode; and the compiler's group_vars are accepted
by the roles' own argument specs (validated with Ansible's validator, not a copy of it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from gpu_collection import COLLECTION, ROLES_DIR, SITE

from rackform.blueprint.loader import load_effective
from rackform.blueprint.schema.sections import FABRICS
from rackform.engine import compile_effective
from rackform.plan.model import thaw
from rackform.push.site import CLUSTER_TAG, site_playbook

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = site_playbook()  # what a push reads from the site playbook
ROLES = PLAYBOOK.roles
EXAMPLES = sorted((ROOT / "blueprints").glob("*.yaml"))
# Every role on disk: the five the site playbook runs, and host_bootstrap, which they depend on.
ALL_ROLES = sorted(p.parent.parent.name for p in ROLES_DIR.glob("*/tasks/main.yml"))
ALLOWED_COLLECTIONS = (
    "ansible.builtin.", "ansible.posix.", "community.general.", "rackform.gpu.",
)  # fmt: skip
TASK_KEYS = {
    "name", "when", "register", "loop", "loop_control", "vars", "notify", "changed_when",
    "failed_when", "check_mode", "become", "delegate_to", "run_once", "tags", "environment",
    "async", "poll", "until", "retries", "delay", "block", "rescue", "always", "listen",
    "no_log", "args",
}  # fmt: skip


def load(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def options(role: str) -> dict:
    return load(ROLES_DIR / role / "meta" / "argument_specs.yml")["argument_specs"]["main"][
        "options"
    ]


def collection_modules() -> set[str]:
    return {f"rackform.gpu.{p.stem}" for p in (COLLECTION / "plugins" / "modules").glob("*.py")}


def tasks(node) -> list[dict]:
    """Every task in a task list, blocks opened."""
    out = []
    for t in node or []:
        out.append(t)
        for key in ("block", "rescue", "always"):
            out += tasks(t.get(key))
    return out


def task_files(role: str) -> list[Path]:
    return sorted((ROLES_DIR / role / "tasks").glob("*.yml")) + sorted(
        (ROLES_DIR / role / "handlers").glob("*.yml")
    )


def action(task: dict) -> str | None:
    keys = [k for k in task if k not in TASK_KEYS]
    return keys[0] if keys else None


@pytest.mark.parametrize("role", ALL_ROLES)
def test_every_default_is_typed_described_and_matches_the_spec(role):
    defaults = load(ROLES_DIR / role / "defaults" / "main.yml")
    spec = options(role)
    assert set(defaults) == set(spec), "defaults/main.yml and argument_specs.yml name the same vars"
    for name, opt in spec.items():
        assert name.startswith(role + "_"), name
        assert opt.get("type") in ("str", "int", "bool", "list", "dict", "path"), name
        assert opt.get("description"), name
        assert opt.get("default") == defaults[name], f"{name}: spec default != defaults/main.yml"
        if opt["type"] == "list":
            assert opt.get("elements"), f"{name}: a list says what it holds"


@pytest.mark.parametrize("role", ALL_ROLES)
def test_readme_lists_every_default(role):
    readme = (ROLES_DIR / role / "README.md").read_text(encoding="utf-8")
    missing = [name for name in options(role) if f"`{name}`" not in readme]
    assert not missing, f"{role}/README.md does not describe {missing}"


@pytest.mark.parametrize("role", ALL_ROLES)
def test_private_variables_are_prefixed(role):
    for path in (ROLES_DIR / role / "vars").glob("*.yml"):
        for name in load(path) or {}:
            assert name.startswith(f"_{role}_"), f"{path.name}: {name}"


@pytest.mark.parametrize("role", ALL_ROLES)
def test_os_dispatch_covers_every_supported_os(role):
    text = (ROLES_DIR / role / "tasks" / "main.yml").read_text(encoding="utf-8")
    if "first_found" in text:
        for os_name in ("Debian", "Ubuntu"):
            assert (ROLES_DIR / role / "vars" / f"{os_name}.yml").is_file()
    meta = load(ROLES_DIR / role / "meta" / "main.yml")["galaxy_info"]["platforms"]
    assert {p["name"] for p in meta} == {"Debian", "Ubuntu"}


@pytest.mark.parametrize("role", ALL_ROLES)
def test_tasks_keep_the_rules(role):
    own = collection_modules()
    for path in task_files(role):
        for t in tasks(load(path)):
            where = f"{role}/{path.parent.name}/{path.name}: {t.get('name')!r}"
            assert t.get("name"), f"{where}: every task has a name"
            assert "ignore_errors" not in t, f"{where}: ignore_errors hides failures"
            mod = action(t)
            if mod is None:  # a block
                continue
            assert mod.startswith(ALLOWED_COLLECTIONS), f"{where}: {mod} is not FQCN"
            if mod.startswith("rackform.gpu."):
                assert mod in own, f"{where}: {mod} is not one of the collection's modules"
            if mod == "ansible.builtin.assert":
                that = t[mod]["that"]
                that = that if isinstance(that, list) else [that]
                assert all(str(c).strip().lower() != "true" for c in that), f"{where}: placeholder"
                assert t[mod].get("fail_msg"), f"{where}: an assert says what is wrong"
            if mod in ("ansible.builtin.command", "ansible.builtin.shell"):
                args = t[mod] if isinstance(t[mod], dict) else {}
                guarded = "changed_when" in t or "creates" in args or "removes" in args
                assert guarded, f"{where}: a command says when it changed something"
                if "changed_when" in t and t["changed_when"] is True:
                    assert "when" in t or "creates" in args, (
                        f"{where}: a command that always changes must run only when needed"
                    )


@pytest.mark.parametrize("role", ALL_ROLES)
def test_handlers_skip_in_check_mode(role):
    path = ROLES_DIR / role / "handlers" / "main.yml"
    if not path.exists():
        return
    for h in load(path):
        assert "not ansible_check_mode" in str(h.get("when", "")), h["name"]


def test_site_playbook_runs_every_role_once_tagged_with_its_name():
    wait, *plays = load(SITE)
    # First every host answers SSH (a node just launched boots first), whatever roles are asked:
    # the nodes and Slurm's controller instance (AWS), the groups rackform.plan.inventory makes.
    task, facts, *grouping = wait["tasks"]
    assert task["ansible.builtin.wait_for_connection"] and task["tags"] == ["always"]
    assert wait["hosts"] == "gpu_nodes:slurm_controller" and wait["gather_facts"] is False
    # ...has its facts read, once for the whole run (every later play reads them)...
    assert facts["ansible.builtin.setup"]["gather_subset"] == ["min", "network"]
    assert facts["tags"] == ["always"]
    # ...and is put in the groups of the plays it is for, whatever roles are asked (every host
    # that got this far: the batches are made of them).
    groups = {t["ansible.builtin.group_by"]["key"] for t in grouping}
    assert groups == {
        "rackform_answered",
        "rackform_slurm",
        "rackform_imex",
        "rackform_smoke_train",
        "rackform_serving",
    }
    assert all(t["tags"] == ["always"] for t in grouping)
    roles = [r for p in plays for r in p.get("roles", [])]
    assert [r["role"] for r in roles] == [f"rackform.gpu.{r}" for r in ROLES]
    assert all(r["tags"] == [r["role"].removeprefix("rackform.gpu.")] for r in roles)
    # The GPU roles run on the nodes (the group every node is in); slurm and the smoke job on
    # the hosts grouped for them (which hosts: tests/roles/test_slurm_config.py runs it).
    hosts = {
        r["role"].removeprefix("rackform.gpu."): p["hosts"]
        for p in plays
        for r in p.get("roles", [])
    }
    assert hosts == {
        r: {
            "slurm": "gpu_nodes:slurm_controller:&rackform_slurm",
            "smoke_train": "gpu_nodes:&rackform_smoke_train",
            "shared_storage": "gpu_nodes",
            "imex": "gpu_nodes:&rackform_imex",
        }.get(r, "gpu_nodes:&rackform_answered")
        for r in ROLES
    }
    # Facts are read once, in the first play: no later play gathers them again.
    assert all(p["gather_facts"] is False for p in plays)
    assert all(p["force_handlers"] is True for p in plays if p.get("roles"))


def _plays() -> dict[str, dict]:
    return {p["name"]: p for p in load(SITE)}


def test_site_playbook_batches_only_the_play_that_reads_no_other_host():
    plays = _plays()
    batched = [n for n, p in plays.items() if "serial" in p]
    assert batched == ["Converge the GPU nodes"]
    gpu = plays["Converge the GPU nodes"]
    assert gpu["serial"] == "{{ rackform_batch | default(0) | int }}"
    assert [r["role"] for r in gpu["roles"]] == [
        f"rackform.gpu.{r}" for r in ("nvidia_driver", "nccl_rdma", "nvme_raid", "dcgm")
    ]
    # ...whose one cross-host file, the scrape config, is left to a play after the batches.
    assert gpu["roles"][-1]["vars"] == {"dcgm_prometheus_deferred": True}
    scrape = plays["Write the cluster's Prometheus scrape config"]
    (write,) = scrape["tasks"]
    assert write["ansible.builtin.import_role"] == {
        "name": "rackform.gpu.dcgm",
        "tasks_from": "scrape.yml",
    }
    assert write["tags"] == ["dcgm"]
    # Each node at its own pace only where nothing reads another host: the first play and the
    # batches. Every other play (run_once, slurm.conf, the NFS server before its clients, the
    # smoke job's rendezvous) runs every host through each task before the next.
    # (`free` where the runner sets no other: Mitogen's `mitogen_free`, rackform/push/strategy.py;
    # a play that names none takes Ansible's default strategy, linear or `mitogen_linear`.)
    free_strategy = "{{ rackform_free_strategy | default('free') }}"
    free = sorted(n for n, p in plays.items() if p.get("strategy") == free_strategy)
    assert free == [
        "Converge the GPU nodes",
        "Install the serving smoke job's torch on a serving cluster's nodes",
        "Wait for every node to answer",
    ]
    assert all(p.get("strategy", "linear") in (free_strategy, "linear") for p in plays.values())
    # Ansible ignores max_fail_percentage under `strategy: free`: the play checks each batch
    # itself, and nothing makes one node's failure every node's.
    for p in plays.values():
        assert "max_fail_percentage" not in p and "any_errors_fatal" not in p, p["name"]
        for t in tasks(p.get("pre_tasks", []) + p.get("tasks", [])):
            assert "any_errors_fatal" not in t, t["name"]
    for role in ALL_ROLES:
        for path in task_files(role):
            for t in tasks(load(path)):
                assert "any_errors_fatal" not in t, f"{role}/{path.name}: {t.get('name')}"
    check = gpu["pre_tasks"][0]
    assert check["name"] == PLAYBOOK.batch_check and check["tags"] == ["always"]
    # The default a push reads is the check's own.
    assert f"rackform_max_fail_percent | default({PLAYBOOK.max_fail_percent})" in str(check)


def test_the_cluster_wide_plays_are_tagged_for_the_runners_last_pass():
    # After a retry brought the missing nodes back, the runner runs the plays tagged
    # CLUSTER_TAG over every node: exactly the ones whose roles write what spans every node.
    plays = _plays()
    tagged = [n for n, p in plays.items() if CLUSTER_TAG in p.get("tags", [])]
    assert tagged == [
        "Write the cluster's Prometheus scrape config",
        "Run Slurm on the nodes and its controller",
        "Validate the GPU nodes with the smoke job",
    ]
    roles = set()
    for name in tagged:
        p = plays[name]
        roles |= {r["tags"][0] for r in p.get("roles", [])} | {
            t["tags"][0] for t in p.get("tasks", [])
        }
    assert sorted(roles) == sorted(PLAYBOOK.cluster_roles)


def test_site_playbook_passes_ansibles_syntax_check(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1: {}\n")
    proc = subprocess.run(
        [Path(sys.executable).with_name("ansible-playbook"), "--syntax-check", "-i", inv,
         SITE],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTION.parents[2]),
             "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout


def _validator(spec: dict) -> ArgumentSpecValidator:
    keep = ("type", "elements", "choices", "default", "required")
    return ArgumentSpecValidator(
        {n: {k: v for k, v in o.items() if k in keep} for n, o in spec.items()}
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_compiled_group_vars_are_accepted_by_the_roles(example):
    variables = thaw(compile_effective(load_effective(example)).group_vars)
    role_vars = {k: v for k, v in variables.items() if not k.startswith("rackform_")}
    for role in ROLES:
        spec = options(role)
        mine = {k: v for k, v in role_vars.items() if k.startswith(role + "_")}
        unknown = sorted(set(mine) - set(spec))
        assert not unknown, f"group_vars sets {unknown}, which {role} does not declare"
        result = _validator(spec).validate(mine)
        assert not result.error_messages, (role, result.error_messages)
    owners = {k for k in role_vars if any(k.startswith(r + "_") for r in ROLES)}
    assert owners == set(role_vars), f"variables no role owns: {set(role_vars) - owners}"


def test_every_role_installs_what_its_modules_need_first():
    # A bare host has no python3-apt (check mode stops at the first apt task without it) and
    # no packaging (the pip module): each role depends on host_bootstrap, which installs them.
    for role in ROLES:
        deps = load(ROLES_DIR / role / "meta" / "main.yml")["dependencies"]
        assert {"role": "rackform.gpu.host_bootstrap"} in deps, role
    needed = load(ROLES_DIR / "host_bootstrap" / "defaults" / "main.yml")["host_bootstrap_packages"]
    assert {"python3-apt", "python3-packaging"} <= set(needed)


def test_nccl_rdma_knows_exactly_the_schemas_fabrics():
    # The role's YAML cannot import rackform: its choices and its per-fabric settings are
    # copies of the schema's list, kept equal here (a fabric added to the schema fails this
    # until the role can configure it).
    assert options("nccl_rdma")["nccl_rdma_fabric"]["choices"] == list(FABRICS)
    settings = load(ROLES_DIR / "nccl_rdma" / "vars" / "main.yml")["_nccl_rdma_fabric_settings"]
    assert set(settings) == set(FABRICS)
