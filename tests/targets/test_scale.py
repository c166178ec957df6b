"""Plans at the largest sizes a blueprint allows: 4,096 bare-metal hosts, 4,096 AWS nodes (a
node group's count is at most 4096).

`rackform plan` of 1,000 bare-metal hosts used to die with a RecursionError inside the Pulumi
SDK: every `pulumi.dynamic.Resource` (each host is one) wrapped `pickle._Pickler._batch_setitems`
once more and never unwrapped it, so pickling the next host's provider went one frame deeper
per host. The program now puts the pickler back after each host, and the offline recorder
leaves it as it found it. These tests run the plans with little stack to spare: whatever the
program does per node must not go deeper with more nodes, by any route (the pickler, an
output or dependency chain, a parent chain)."""

from __future__ import annotations

import contextlib
import copy
import json
import pickle
import sys
from collections.abc import Iterator

import pytest
from blueprint_helpers import rackform
from planhelp import AWS_TRAINING, BARE_METAL, of_type, one, plan, write_blueprint

MAX_NODES = 4096
# Frames the whole program may use above its caller. A plan of 2 nodes needs about 45 (bare
# metal) and 50-100 (AWS), and so does a plan of 4,096 once nothing grows with the node count;
# before the fix a bare-metal plan needed one more frame per host.
HEADROOM = 250


def hosts(n: int) -> list[dict]:
    return [
        {"name": f"n{i}", "address": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"}
        for i in range(1, n + 1)
    ]


def bare_metal(n: int) -> dict:
    doc = copy.deepcopy(BARE_METAL)
    doc["target"]["private_cidr"] = "10.0.0.0/8"
    doc["node_groups"][0]["hosts"] = hosts(n)
    return doc


def aws(n: int) -> dict:
    doc = copy.deepcopy(AWS_TRAINING)
    doc["node_groups"][0]["count"] = n
    return doc


def _depth() -> int:
    frame, n = sys._getframe(), 0
    while frame is not None:
        n, frame = n + 1, frame.f_back
    return n


@contextlib.contextmanager
def little_stack(headroom: int = HEADROOM) -> Iterator[None]:
    """Python's recursion limit set to `headroom` frames above the caller, for the block."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(_depth() + headroom)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def _pickler() -> dict:
    return dict(vars(pickle._Pickler))


@pytest.mark.parametrize(
    ("doc", "node_type"),
    [
        (bare_metal(MAX_NODES), "dynamic/rackform:Host"),
        (aws(MAX_NODES), "ec2/instance:Instance"),
    ],
    ids=["bare_metal", "aws"],
)
def test_4096_nodes_plan_with_a_bounded_stack(tmp_path, doc, node_type):
    import rackform.stack.program  # noqa: F401  (its imports are not what is measured)

    pickler = _pickler()
    with little_stack():
        records = plan(tmp_path, doc)
    nodes = of_type(records, node_type)
    assert len(nodes) == MAX_NODES
    # Configuration waits for every node, and sees all of them.
    configure = one(records, "dynamic/rackform:Configure")
    assert {n.name for n in nodes} <= set(configure.dependencies)
    # The recorder leaves the pure-Python pickler as it found it.
    assert _pickler() == pickler


def test_a_plan_leaves_the_pickler_as_it_found_it(tmp_path):
    pickler = _pickler()
    for _ in range(3):
        plan(tmp_path, bare_metal(3))
    assert _pickler() == pickler


def test_each_host_puts_the_pickler_back(tmp_path):
    """Inside one program, hosts do not pile wrappers on the pickler: the SDK's own wrapper is
    in place only while a host's provider is pickled."""
    from pulumi.dynamic.dynamic import serialize_provider

    from rackform.targets.onprem.cluster import sdk_pickler_kept
    from rackform.targets.onprem.hosts import HostProvider

    before = _pickler()
    with sdk_pickler_kept():
        serialize_provider(HostProvider())  # pulumi 3.272 leaves the pickler wrapped
    assert _pickler() == before


def test_rackform_plan_of_4096_bare_metal_hosts_exits_0(tmp_path):
    """The issue's command, in a process of its own, with Python's default recursion limit.
    About 10 s of CPU alone; CI's run of 2026-11-27 took over 120 s of wall time beside the
    e2e's VMs, so the hang guard is generous."""
    path = write_blueprint(tmp_path, bare_metal(MAX_NODES))
    r = rackform("plan", path, "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["counts"]["pulumi-python:dynamic/rackform:Host"] == MAX_NODES
