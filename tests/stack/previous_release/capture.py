"""Write providers.json: the dynamic resources a release's program registers, as that release
records them in a stack's state (the inputs and the outputs, each with the pickled provider
Pulumi's dynamic module stores under `__provider`).

Run it in a checkout of the release to record, with that checkout first on the path:

    git worktree add /tmp/prev <commit>
    cd /tmp/prev && PYTHONPATH=$PWD:$PWD/tests:$PWD/tests/stack .venv/bin/python \
        tests/stack/previous_release/capture.py <this tree>/tests/stack/previous_release

The program runs under Pulumi's mocks (the recorder of `rackform plan`, with the mocks keeping
`__provider`, which the plan leaves out), and each resource is created through Pulumi's own
dynamic provider server (tests/stack/dynamic_server.py; copy it beside this script in a
checkout older than it), so the outputs are
what that server writes. What this machine cannot reach is stood in for: the hosts answer SSH
through the tests' fake ssh (they run the probe here), and the stages' work (Ansible over the
nodes, the smoke job) is replaced, at the names the pickled providers hold, by functions that
return what a run returns. The work's names are those of the releases that loaded the stages by
"module:function" strings.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import dill
import dynamic_server
import fake_ssh

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.stack import offline

ROOT = Path(__file__).resolve().parents[3]
BLUEPRINTS = ("baremetal-slurm.yaml", "aws-training.yaml")
PROVIDER_KEY = "__provider"


class KeepingMocks(offline.RecordingMocks):
    """The plan's mocks, keeping each dynamic resource's whole inputs, `__provider` included."""

    kept: ClassVar[dict[str, dict[str, Any]]] = {}

    def new_resource(self, args):
        if args.typ.startswith("pulumi-python:dynamic") and PROVIDER_KEY in args.inputs:
            KeepingMocks.kept[f"{args.typ}::{args.name}"] = dict(args.inputs)
        return super().new_resource(args)


def summary(**kwargs: Any) -> dict[str, Any]:
    """What the converge returns (the push runner's summary), for each host of the inventory."""
    inv = kwargs["inventory"]["all"]["children"]["gpu_nodes"]["children"]
    hosts = sorted(h for g in inv.values() for h in g.get("hosts") or {})
    each = {"ok": 42, "changed": 17, "failed": 0, "unreachable": 0, "skipped": 9, "rescued": 0}
    return {
        "rc": 0,
        "seconds": 812.4,
        "changed": 17 * len(hosts),
        "hosts": dict.fromkeys(hosts, each),
    }


def report(**kwargs: Any) -> dict[str, Any]:
    """What the cluster's validation returns: a passing report."""
    return {
        "checks": [
            {"name": "gpu_count", "status": "pass", "measured": 32, "expected": 32, "unit": "GPUs"},
            {"name": "loss_drop", "status": "pass", "measured": 0.61, "expected": 0.2, "unit": ""},
            {"name": "dcgm_diag", "status": "not-run", "measured": None, "expected": "r1",
             "unit": ""},
        ],
    }  # fmt: skip


STAND_INS = {"configure": summary, "validate_cluster": report}


def stand_in(provider: Any) -> None:
    """Replace, in its module, each piece of work a stage provider names by a string."""
    for value in vars(provider).values():
        if isinstance(value, str) and ":" in value:
            module, _, attr = value.partition(":")
            if attr in STAND_INS:
                setattr(importlib.import_module(module), attr, STAND_INS[attr])


def create(typ: str, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Create the resource through Pulumi's dynamic provider server: (id, outputs)."""
    stand_in(dill.loads(base64.b64decode(inputs[PROVIDER_KEY])))
    return dynamic_server.create(urn(typ, name), inputs)


def urn(typ: str, name: str) -> str:
    return f"urn:pulumi:capture::rackform::{typ}::{name}"


def main(out: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="capture-"))
    os.environ["PATH"] = f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}"
    os.environ["FAKE_SSH_LOG"] = str(work / "ssh.log")
    os.environ["RACKFORM_ROLLOUT_DIR"] = str(work / "rollout")
    os.environ.pop("RACKFORM_EVIDENCE_SIGNING_KEY", None)
    fake_ssh.install(work / "bin")
    offline.RecordingMocks = KeepingMocks
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    resources = []
    for bp in BLUEPRINTS:
        plan = compile_effective(load_effective(ROOT / "blueprints" / bp, None))
        KeepingMocks.kept = {}
        offline.record(plan)
        seen = set()
        for key, inputs in sorted(KeepingMocks.kept.items()):
            typ, name = key.split("::")
            inputs = {k: v for k, v in inputs.items() if v is not None}
            if typ in seen or offline.KNOWN_AFTER_UP in json.dumps(offline.plain(inputs)):
                continue  # one of each kind, and only what is known before up
            seen.add(typ)
            id_, outputs = create(typ, name, inputs)
            resources.append(
                {
                    "blueprint": f"blueprints/{bp}",
                    "type": typ,
                    "name": name,
                    "urn": urn(typ, name),
                    "id": id_,
                    "inputs": inputs,
                    "outputs": outputs,
                }
            )
    doc = {
        "_comment": (
            f"Recorded by tests/stack/previous_release/capture.py at commit {commit}: the "
            "dynamic resources of a stack made by that release, as its state holds them."
        ),
        "commit": commit,
        "resources": resources,
    }
    path = out / "providers.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{path}: {len(resources)} resources", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
