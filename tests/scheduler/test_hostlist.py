"""Slurm hostlist expressions as node names (the forms squeue, sinfo and the job records print)."""

from __future__ import annotations

import pytest

from rackform.scheduler.hostlist import HostlistError, expand


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node1", ["node1"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("hgx-0[1-2],hgx-04", ["hgx-01", "hgx-02", "hgx-04"]),
        ("gpu-a[08-10]", ["gpu-a08", "gpu-a09", "gpu-a10"]),  # the padding is kept
        ("slurm-a-[0-1]", ["slurm-a-0", "slurm-a-1"]),
        ("n[1,3-4]", ["n1", "n3", "n4"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        (" a , b ", ["a", "b"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expands(expr, names):
    assert expand(expr) == names


@pytest.mark.parametrize("expr", ["node[1-3", "node1-3]", "node[a-b]", "node[1-]"])
def test_a_malformed_list_is_an_error_naming_it(expr):
    with pytest.raises(HostlistError, match="node"):
        expand(expr)
