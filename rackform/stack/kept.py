"""The rule a kept resource must keep: nothing it depends on is deleted by `destroy`.

A resource `destroy` leaves (Pulumi's `retain_on_delete` or `protect`, or anything in a stack
`rackform destroy` never destroys) that depends on one `destroy` deletes stops that destroy
part-way, or is left pointing at nothing: AWS refuses to delete a subnet or a security group
while a kept file system's network interfaces sit in it (DependencyViolation, EC2 API
reference, DeleteSubnet and DeleteSecurityGroup). `violations` walks the offline plan's
resource graph (`offline.record`) to find every such pair.

What counts as "depends on", as the engine and the cloud see it:
- the registration's dependencies: `depends_on`, and every resource whose output is an input
  (the SDK sends them with the registration);
- a custom parent (Pulumi deletes children before their parent; a kept child of a deleted
  parent is left under nothing);
- a reference in the inputs: the mocks answer every id and computed output as `<name>.<attr>`,
  so an id that reached an input without its dependency (a plain string, a config value, a
  StackReference's output) still names the resource it came from;
- a dependency on a component stands for every resource under it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rackform.stack.offline import Record

_REF = re.compile(r"<([^<>]+)>\.[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Node:
    stack: str
    record: Record

    @property
    def label(self) -> str:
        return f"{self.record.name} ({self.record.type}, stack {self.stack})"


def kept(node: Node, destroyed: Collection[str]) -> bool:
    """Left in the cloud by `destroy`: retained, protected, or in a stack it never destroys."""
    r = node.record
    return r.custom and (r.retain_on_delete or r.protect or node.stack not in destroyed)


def deleted(node: Node, destroyed: Collection[str]) -> bool:
    """Deleted from the cloud by `destroy` of its stack."""
    r = node.record
    return r.custom and node.stack in destroyed and not (r.retain_on_delete or r.protect)


def references(value: Any) -> set[str]:
    """The names of the resources a value's `<name>.<attr>` placeholders name."""
    if isinstance(value, str):
        return set(_REF.findall(value))
    if isinstance(value, dict):
        return set().union(*map(references, value.values())) if value else set()
    if isinstance(value, list | tuple):
        return set().union(*map(references, value)) if value else set()
    return set()


def _graph(stacks: Sequence[tuple[str, Iterable[Record]]]) -> dict[str, tuple[Node, set[str]]]:
    """URN -> (node, the URNs of the custom resources it depends on)."""
    nodes = {r.urn: Node(stack, r) for stack, records in stacks for r in records}
    by_name: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    for urn, n in nodes.items():
        by_name.setdefault(n.record.name, []).append(urn)
        if n.record.parent_urn:
            children.setdefault(n.record.parent_urn, []).append(urn)

    def customs(urn: str) -> set[str]:
        """A custom resource itself; a component as every custom resource under it."""
        n = nodes.get(urn)
        if n is None:
            return set()  # a read (`Resource.get`, a StackReference): nothing destroy deletes
        if n.record.custom:
            return {urn}
        return set().union(*(customs(c) for c in children.get(urn, [])), set())

    out = {}
    for urn, n in nodes.items():
        r = n.record
        direct = set(r.dependency_urns)
        parent = nodes.get(r.parent_urn or "")
        if parent is not None and parent.record.custom:
            direct.add(parent.record.urn)
        for name in references(r.inputs):
            direct.update(by_name.get(name, []))
        direct.discard(urn)
        out[urn] = (n, set().union(*(customs(d) for d in direct), set()) - {urn})
    return out


def violations(
    stacks: Sequence[tuple[str, Iterable[Record]]], destroyed: Collection[str]
) -> list[str]:
    """Each kept resource that depends, directly or through others, on a resource `destroy`
    deletes, as `kept -> ... -> deleted`. `stacks`: (stack, its records) for every stack of a
    deployment; `destroyed`: the stacks `rackform destroy` destroys."""
    graph = _graph(stacks)
    found = []
    for urn, (node, _) in sorted(graph.items()):
        if not kept(node, destroyed):
            continue
        path = _path_to_deleted(urn, graph, destroyed)
        if path:
            found.append(" -> ".join(graph[u][0].label for u in path))
    return found


def _path_to_deleted(start: str, graph, destroyed) -> list[str] | None:
    """The shortest path from `start` along dependencies to a deleted resource (breadth
    first), or None."""
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        urn = queue.pop(0)
        for dep in sorted(graph[urn][1]):
            if dep in previous or dep not in graph:
                continue
            previous[dep] = urn
            if deleted(graph[dep][0], destroyed):
                path = [dep]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return path[::-1]
            queue.append(dep)
    return None
