"""Adding a target takes its package and one line in each layer's registry: a stub target, laid
out as a real one (tests/engine/stub_target/), is registered the way those lines do and then
validates, compiles, prices and plans through the same engine as aws, bare_metal and colocation,
and `rackform init` starts a repository from its own blueprint.

The blueprint model is assembled from the schema registry when it is first imported, so the
registration runs in a fresh interpreter, before that import, as a line in
`rackform/targets/schemas.py` would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# The three registry lines a new target adds, then what a user runs.
SCRIPT = """
import json, sys
from stub_target import schema
from rackform.targets.schemas import SCHEMAS
SCHEMAS["stub"] = schema.SCHEMA
from stub_target import compile, runtime
from rackform.targets.compilers import COMPILERS
from rackform.targets.runtimes import RUNTIMES
COMPILERS["stub"] = compile.COMPILER
RUNTIMES["stub"] = runtime.RUNTIME

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
out["resources"] = [[r.type, r.name, r.inputs] for r in record(plan)]

from pathlib import Path
from rackform.init.repo import render
files = render(Path("new-repo"), target="stub", purpose="training")
out["init"] = {"files": sorted(files), "readme": files["README.md"]}
print(json.dumps(out))
"""

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
