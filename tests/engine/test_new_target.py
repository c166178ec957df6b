"""Adding a target takes a part in each layer it serves and one line in each layer's registry:
a stub target, its schema, compile and runtime parts laid out as a real target's are (one module
each in tests/engine/stub_target/, where a real target has one package per layer), is
registered the way those lines do and then validates, compiles, prices and plans through the
same engine as aws, bare_metal and colocation, `rackform init` starts a repository from its own
blueprint, `rackform reap` decides on its clusters through its own reaper, and `rackform drift
--hosts` reaches the nodes its runtime lists.

The blueprint model is assembled from the schema registry when it is first imported, so the
registration runs in a fresh interpreter, before that import, as a line in the schema's
registry would; the commands run there through rackform's own `main`. The stub's machines are a
JSON file the test writes (the stub cloud, $STUB_CLOUD)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from loopback import free_port
from servers import Gpu, prometheus

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# The three registry lines a new target adds.
REGISTER = """
import json, sys
from stub_target import schema
from rackform.blueprint.targets.schemas import SCHEMAS
SCHEMAS["stub"] = schema.SCHEMA
from stub_target import compile, runtime
from rackform.plan.targets.compilers import COMPILERS
from rackform.targets.runtimes import RUNTIMES
COMPILERS["stub"] = compile.COMPILER
RUNTIMES["stub"] = runtime.RUNTIME
"""

# The `rackform` command, with the stub registered.
CLI = (
    REGISTER
    + """
from rackform.cli.main import main
sys.argv[0] = "rackform"
main()
"""
)

# What a user runs, in-process.
SCRIPT = (
    REGISTER
    + """
from rackform.blueprint.problems import BlueprintError
from rackform.engine import prepare
from rackform.stack.offline import record

out = {"errors": {}}
for path in sys.argv[2:]:
    try:
        prepare(path)
    except BlueprintError as exc:
        out["errors"][path] = [str(p) for p in exc.problems]
prepared = prepare(sys.argv[1])
plan = prepared.plan
out["blocked"] = prepared.blocked
out["nodes"] = plan.nodes
out["gpus"] = plan.gpus
out["ssh_user"] = plan.ssh_user
out["stack_config"] = dict(plan.stack_config)
out["usd_per_month"] = prepared.report.cost.usd_per_month
out["resources"] = [[r.type, r.name, r.inputs] for r in record(plan, RUNTIMES[plan.target_type])]

from pathlib import Path
from rackform.init.repo import render
files = render(Path("new-repo"), target="stub", purpose="training")
out["init"] = {"files": sorted(files), "readme": files["README.md"]}
print(json.dumps(out))
"""
)

STUB = {
    "name": "stub-a",
    "purpose": "training",
    "owner": "team@example.com",
    "target": {"type": "stub", "usd_per_node_hour": 2.5},
    "node_groups": [
        {"name": "gpu", "count": 2, "gpu": "H100-SXM", "gpus_per_node": 8, "flavor": "large"}
    ],
    "network": {"fabric": "ethernet"},
}


def write(tmp: Path, name: str, doc: dict) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def run_with_stub(tmp: Path, *paths: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, *paths],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def stub_rackform(tmp: Path, cloud: dict, *args: str) -> subprocess.CompletedProcess:
    """`rackform ARGS` with the stub registered, over the stub cloud `cloud` (tmp/cloud.json)."""
    (tmp / "cloud.json").write_text(json.dumps(cloud, indent=2))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        "STUB_CLOUD": str(tmp / "cloud.json"),
    }
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def machines(stack: str, count: int, port: int = 22) -> dict:
    """A stub cluster's running machines in the stub cloud: one node group `gpu`."""
    return {"gpu": [[f"{stack}-gpu-{i}", "127.0.0.1", port, f"m-{i}"] for i in range(count)]}


def test_a_registered_stub_target_validates_compiles_and_plans(tmp_path):
    good = write(tmp_path, "stub", STUB)
    no_flavor = {**STUB, "node_groups": [{"name": "gpu", "count": 1}]}
    typo = {**STUB, "target": {"type": "stub", "usd_per_node_hour": 2.5, "regoin": "x"}}
    aws_field = {**STUB, "node_groups": [{**STUB["node_groups"][0], "min_count": 1}]}
    bad = [
        write(tmp_path, "no-flavor", no_flavor),
        write(tmp_path, "typo", typo),
        write(tmp_path, "aws-field", aws_field),
    ]
    out = run_with_stub(tmp_path, good, *bad)

    # Validates: its own rule, its own model (extra fields refused), and another target's
    # node-group field refused, each located in the file.
    errors = {
        Path(path).name: [e.split(":", 1)[1] for e in es] for path, es in out["errors"].items()
    }
    assert errors == {
        "no-flavor.yaml": [
            "8:3: node_groups[0].flavor: a stub node group needs a flavor (fix: add one)"
        ],
        "typo.yaml": [
            "7:3: target.regoin: unknown field 'regoin' (fix: one of: type, usd_per_node_hour)"
        ],
        "aws-field.yaml": [
            "13:14: node_groups[0].min_count: min_count is for aws node groups, not stub "
            "(fix: remove min_count)"
        ],
    }

    # Compiles and prices with its own parts.
    assert (out["nodes"], out["gpus"], out["ssh_user"]) == (2, 16, "stub")
    assert out["stack_config"]["stub:rate"] == "2.5"
    assert out["usd_per_month"] == 2 * 2.5 * 730  # its own price, the catalog's hours/month
    assert out["blocked"] is False

    # Plans: the real program creates its component, one machine per node, then configures
    # and validates them, as for every target.
    types = [t for t, _, _ in out["resources"]]
    assert types[:2] == ["rackform:cluster:Cluster", "rackform:stub:Nodes"]
    machines = [(n, i) for t, n, i in out["resources"] if t == "stub:index:Machine"]
    assert machines == [
        ("stub-a-default-gpu-0", {"flavor": "large"}),
        ("stub-a-default-gpu-1", {"flavor": "large"}),
    ]
    assert types[-2:] == [
        "pulumi-python:dynamic/rackform:Configure",
        "pulumi-python:dynamic/rackform:Validate",
    ]

    # `rackform init` starts a repository from the target's own blueprint (its package's
    # init/training.yaml), with what its runtime says in the README.
    files, readme = out["init"]["files"], out["init"]["readme"]
    assert "blueprints/stub-train.yaml" in files, files
    assert "the stub cloud" in readme and "The stub's machines need no credentials." in readme
    assert "`rackform configure blueprints/stub-train.yaml --env dev` reruns" in readme


IDLE = {"gpu_util_below_pct": 10, "for_minutes": 60, "action": "stop", "grace_minutes": 0}


def test_reaps_dry_run_decides_on_stub_clusters_through_the_stubs_reaper(tmp_path):
    """A real Prometheus holds three hours of dcgm-exporter history: stub-idle's GPUs at 2%,
    stub-guarded's too (but the stub cloud tags it protect), stub-busy's at 60%. The dry run
    would stop stub-idle alone and leaves the stub cloud as it was; --apply then stops it
    through the stub's reaper, and only it."""
    now = time.time()
    names = {"stub-idle": 2.0, "stub-guarded": 2.0, "stub-busy": 60.0}
    gpus = [
        Gpu(name, "default", "training", f"{name}-default-gpu-{i}", g, util)
        for name, util in names.items()
        for i in range(2)
        for g in range(2)
    ]
    group = {**STUB["node_groups"][0], "gpus_per_node": 2}
    files = [
        write(
            tmp_path,
            name,
            {**STUB, "name": name, "node_groups": [group], "lifecycle": {"idle": IDLE}},
        )
        for name in names
    ]
    started = now - 5 * 3600
    cloud = {
        "clusters": {
            f"{name}-default": {
                "tags": {"protect": "true"} if name == "stub-guarded" else {},
                "started": started,
                "machines": machines(f"{name}-default", 2),
            }
            for name in names
        },
        "acts": [],
    }
    state = tmp_path / "reap-state"
    with prometheus(gpus, tmp_path / "prom", now) as prom:
        reap = ["reap", *files, "--prometheus", prom, "--json", "--state-dir", str(state)]
        dry = stub_rackform(tmp_path, cloud, *reap)
        assert dry.returncode == 0, dry.stderr
        after_dry = json.loads((tmp_path / "cloud.json").read_text())
        applied = stub_rackform(tmp_path, cloud, *reap, "--apply")
        assert applied.returncode == 0, applied.stderr
    doc = json.loads(dry.stdout)
    assert doc["applied"] is False
    got = {
        d["cluster"]: (d["target"], d["verdict"], d["action"], d["step"]) for d in doc["clusters"]
    }
    assert got == {
        "stub-idle": ("stub", "idle", "stop", "act"),
        "stub-guarded": ("stub", "protected", None, None),
        "stub-busy": ("stub", "busy", None, None),
    }
    guarded = next(d for d in doc["clusters"] if d["cluster"] == "stub-guarded")
    assert "live tags: stub:protect=true" in guarded["reasons"]
    assert after_dry == cloud  # the dry run acted on nothing

    # --apply carries the same decision out through the stub's reaper: stub-idle alone.
    done = {d["cluster"]: d["outcome"] for d in json.loads(applied.stdout)["clusters"]}
    assert done == {"stub-idle": "done", "stub-guarded": "none", "stub-busy": "none"}
    after = json.loads((tmp_path / "cloud.json").read_text())
    assert after["acts"] == [{"stack": "stub-idle-default", "action": "stop"}]
    assert after["clusters"]["stub-idle-default"]["machines"] == {"gpu": []}
    assert after["clusters"]["stub-busy-default"] == cloud["clusters"]["stub-busy-default"]


def test_host_drift_checks_the_nodes_the_stubs_runtime_lists(tmp_path):
    """`rackform drift --hosts` runs the roles in check mode (a real ansible run) over the
    machines the stub cloud says run now: both point at a loopback port nobody listens on, so
    each is named, and reported unreachable (never "no drift"). A cluster the stub cloud does
    not know, or one with no machine running, is refused with one line."""
    bp = write(tmp_path, "stub", STUB)
    port = free_port()  # closed: ssh's connection is refused
    cloud = {
        "clusters": {
            "stub-a-default": {
                "tags": {},
                "started": 0,
                "machines": machines("stub-a-default", 2, port),
            }
        },
        "acts": [],
    }
    proc = stub_rackform(tmp_path, cloud, "drift", bp, "--hosts", "--no-resources", "--json")
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    assert {(i["host"], i["kind"]) for i in doc["hosts"]} == {
        ("stub-a-default-gpu-0", "unreachable"),
        ("stub-a-default-gpu-1", "unreachable"),
    }
    # Reached where the stub cloud says each one runs.
    assert all(f"127.0.0.1 port {port}: Connection refused" in i["detail"][0] for i in doc["hosts"])
    assert doc["resources"] == [] and doc["drifted"] is True

    gone = stub_rackform(
        tmp_path, {"clusters": {}, "acts": []}, "drift", bp, "--hosts", "--no-resources"
    )
    assert gone.returncode == 2
    assert gone.stderr.strip() == (
        f"rackform: {bp}: host level: cannot read the cluster's nodes: the stub cloud has no "
        "cluster stub-a-default; use --resources (the configure resource's refresh runs the "
        "same check)"
    )
    stopped = {
        "clusters": {
            "stub-a-default": {**cloud["clusters"]["stub-a-default"], "machines": {"gpu": []}}
        },
        "acts": [],
    }
    idle = stub_rackform(tmp_path, stopped, "drift", bp, "--hosts", "--no-resources")
    assert idle.returncode == 2
    assert "no node of cluster stub-a (default) is running; use --resources" in idle.stderr
