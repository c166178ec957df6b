"""How the provider of a target's resources reacts to a changed input, as data (each rule citing
its source), for comparing two offline plans: `replaced_by`: resource type -> {input: source} of
inputs that force a new resource; `versioned`: type -> (output, inputs that make no new
version) of a versioned resource, whose other changes make a new version (that output
changes); `rolls`: type -> inputs whose change replaces the resource's running instances
without replacing it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReplaceRules:
    replaced_by: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    versioned: Mapping[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    rolls: Mapping[str, frozenset[str]] = field(default_factory=dict)
