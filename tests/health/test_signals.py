"""What heal takes from Prometheus's labels: where the blueprint lists no nodes (AWS), the nodes
heal judges are the names in the `node` label, which it then drains, reaches over SSH and hands
Ansible. A label that is no host name is refused where it is read, naming the value and where it
came from; a cluster whose labels are host names is judged as before."""

from __future__ import annotations

import pytest

from rackform.blueprint.schema.health import HealthPolicy
from rackform.health import signals
from rackform.telemetry import labels as L
from rackform.telemetry.labels import Key
from rackform.telemetry.prometheus import Sample, TelemetryError

KEY = Key("llm-serve-a", "dev", "inference")


class Labels:
    """A Prometheus whose GPU series carry these `node` labels, and nothing else."""

    def __init__(self, *nodes: str):
        self.nodes = nodes

    def query(self, expr: str, at: float) -> list[Sample]:
        if expr.startswith(f"count by ({L.NODE}) (count_over_time("):
            return [Sample({L.NODE: n}, 1.0) for n in self.nodes]
        return []

    def query_range(self, expr: str, at: float) -> list:
        return []


@pytest.mark.parametrize("label", ["-oProxyCommand=touch /tmp/x", "node1;rm -rf /", "", "a b"])
def test_a_node_label_that_is_no_host_name_is_refused_not_acted_on(label):
    prom = Labels("i-0123456789abcdef0", label)
    with pytest.raises(TelemetryError) as exc:
        signals.read(prom, KEY, {}, HealthPolicy(), 1e9, unlisted=("serve", 4))
    assert f"names a node {label!r}, which is no host name: refused" in str(exc.value)
    assert f"Prometheus ({L.GPU_UTIL}" in str(exc.value) and f"label {L.NODE})" in str(exc.value)


def test_host_name_labels_are_the_nodes_judged():
    prom = Labels("i-0b", "i-0a", "gpu-node-01.dc2")
    nodes = signals.read(prom, KEY, {}, HealthPolicy(), 1e9, unlisted=("serve", 4))
    assert [n.node for n in nodes] == ["gpu-node-01.dc2", "i-0a", "i-0b"]
