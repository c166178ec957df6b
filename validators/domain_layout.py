"""Which ranks form each NVLink domain, from the plan's domain map (`--nvlink-domain
NAME=HOST[,HOST...]`, one per domain) and each rank's node, and the groups the domain
measurements run over (validators/domain_collectives.py). Standard library only, pure.

A node knows its name from `SLURMD_NODENAME` (Slurm sets it to the node's NodeName, the
inventory's name, which is what the plan's map uses), else its host name (also by its short
name, before the first dot). Names are checked with the patterns rackform's blueprint loader
uses (rackform/blueprint/schema/names.py NODE and SWITCH; a test holds them equal): nothing in
the map reaches a log or a report that a blueprint could not have declared."""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NODE = r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$"  # names.NODE
DOMAIN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"  # names.SWITCH (topology.conf's BlockName=)


class DomainMapError(ValueError):
    """A domain map that cannot be: a bad name, an empty domain, a node in two domains."""


def parse_map(specs: Sequence[str]) -> dict[str, str]:
    """`NAME=HOST[,HOST...]` per domain -> {host: domain}, in the order given."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for spec in specs:
        name, sep, hosts = spec.partition("=")
        if not sep or not re.fullmatch(DOMAIN, name):
            raise DomainMapError(
                f"--nvlink-domain {spec!r}: expected NAME=HOST[,HOST...] with NAME of letters, "
                "digits, '.', '_' and '-' (not first)"
            )
        if name in seen:
            raise DomainMapError(f"--nvlink-domain: domain {name!r} given twice")
        seen.add(name)
        nodes = hosts.split(",")
        for host in nodes:
            if not re.fullmatch(NODE, host):
                raise DomainMapError(f"--nvlink-domain {name}: {host!r} is not a node name")
            if host in out:
                raise DomainMapError(
                    f"--nvlink-domain: node {host} is in domains {out[host]} and {name}"
                )
            out[host] = name
    return out


def node_name(env: Mapping[str, str]) -> str:
    """This node's name as the plan's map names it: Slurm's, else the host name."""
    return env.get("SLURMD_NODENAME") or socket.gethostname()


def domain_of(host: str, mapping: Mapping[str, str]) -> str | None:
    """The node's domain: by its name, else by its short host name."""
    return mapping.get(host) or mapping.get(host.split(".", 1)[0])


@dataclass(frozen=True)
class Layout:
    """The job's ranks by domain, each domain's ranks in rank order, domains in the order of
    their first rank."""

    domains: tuple[tuple[str, tuple[int, ...]], ...]

    @classmethod
    def of(cls, domain_by_rank: Sequence[str]) -> Layout:
        by: dict[str, list[int]] = {}
        for rank, d in enumerate(domain_by_rank):
            by.setdefault(d, []).append(rank)
        return cls(tuple((d, tuple(r)) for d, r in by.items()))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d for d, _ranks in self.domains)

    def ranks(self, domain: str) -> tuple[int, ...]:
        return dict(self.domains)[domain]

    def leader(self, domain: str) -> int:
        return self.ranks(domain)[0]

    def positions(self) -> tuple[tuple[int, ...], ...]:
        """The ranks of equal position across domains (the k-th rank of each), for k below the
        smallest domain's size: the groups a hierarchical all-reduce's cross-domain stage runs
        over. None with one domain."""
        if len(self.domains) < 2:
            return ()
        k = min(len(r) for _name, r in self.domains)
        return tuple(tuple(r[i] for _name, r in self.domains) for i in range(k))

    def links(self) -> tuple[tuple[str, str], ...]:
        """A ring over the domains, consecutive pairs (two domains: one link; one: none)."""
        n = self.names
        if len(n) < 2:
            return ()
        if len(n) == 2:
            return ((n[0], n[1]),)
        return tuple((n[i], n[(i + 1) % len(n)]) for i in range(len(n)))
