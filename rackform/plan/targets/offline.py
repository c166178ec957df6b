"""What the offline plan's mocks answer for a target's Pulumi provider, by resource type or call
token: the outputs a type computes when it is created (shown as `<name>.<attr>` references), the
outputs left unknown as in a real preview, and its data-source calls (token -> the call's
arguments -> its result, where `UNKNOWN` stands for a value only the cloud knows). Data: a
target's compiler gives one, the mocks merge them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A call's result not known before the stack runs (the mocks answer it as Pulumi's unknown).
UNKNOWN = object()


@dataclass(frozen=True)
class OfflineAnswers:
    computed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unknown: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    calls: Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = field(default_factory=dict)

    @staticmethod
    def merged(answers: Iterable[OfflineAnswers]) -> OfflineAnswers:
        """Every target's at once (the tokens carry each provider's name)."""
        computed: dict[str, tuple[str, ...]] = {}
        unknown: dict[str, tuple[str, ...]] = {}
        calls: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {}
        for a in answers:
            computed.update(a.computed)
            unknown.update(a.unknown)
            calls.update(a.calls)
        return OfflineAnswers(computed, unknown, calls)
