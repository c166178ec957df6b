"""What a preflight rule is, what it finds, and what it looks at.

In the manner of aws-parallelcluster's validators: one small class per rule, each with a
stable code and a level, each finding naming the blueprint field, what is wrong (with the
numbers) and how to fix it. Rules read a `Context` over the compiled plan (with the catalog
and preflight figures it carries), and never touch the network or a disk. Each rule names its
code; its level and summary are data (`rackform.preflight.codes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from rackform.blueprint.schema.model import Blueprint
from rackform.blueprint.yamlmap import Path
from rackform.catalog import Catalog, GpuModel
from rackform.catalog.preflight import PreflightFigures
from rackform.plan import sizing
from rackform.plan.model import ArrayPlan, NodeGroupPlan, Plan
from rackform.preflight.codes import CODES, Level

ERROR: Level = "error"
WARNING: Level = "warning"


@dataclass(frozen=True)
class Finding:
    level: Level
    code: str
    path: Path  # into the effective blueprint
    message: str
    fix: str
    waived: str | None = None  # the waiver's reason, when the blueprint accepts the finding

    @property
    def blocks(self) -> bool:
        """An unwaived error stops `validate` and `plan`."""
        return self.level == ERROR and self.waived is None


class Rule:
    """One check. Subclasses set `code` (a key of `CODES`, which gives its level and summary)
    and implement `check`."""

    code: ClassVar[str]
    level: ClassVar[Level]
    summary: ClassVar[str]  # one line, for the README and `--help`

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.code not in CODES:
            raise TypeError(f"{cls.__name__}: code {cls.code!r} is not in preflight/codes.py")
        cls.level, cls.summary = CODES[cls.code]

    def check(self, ctx: Context) -> Iterable[Finding]:
        raise NotImplementedError

    def finding(self, path: Path, message: str, fix: str) -> Finding:
        return Finding(self.level, self.code, path, message, fix)


@dataclass
class Context:
    """Everything a rule may read about one compiled plan."""

    plan: Plan

    @property
    def blueprint(self) -> Blueprint:
        return self.plan.effective.blueprint

    @property
    def catalog(self) -> Catalog:
        return self.plan.catalog

    @property
    def figures(self) -> PreflightFigures:
        return self.plan.figures

    @property
    def training(self) -> bool:
        return self.plan.purpose == "training"

    @cached_property
    def gpu_groups(self) -> list[tuple[int, NodeGroupPlan, GpuModel]]:
        """(index in node_groups, group, GPU model) for every group with GPUs."""
        return [(i, g, g.gpu) for i, g in self.plan.gpu_groups]

    @property
    def gpus(self) -> int:
        return sum(g.gpus for _, g, _ in self.gpu_groups)

    @property
    def nodes(self) -> int:
        return sum(g.count for _, g, _ in self.gpu_groups)

    def usable_gb(self, model: GpuModel) -> float:
        return model.memory_gb.value * (1 - self.figures.memory.reserve_fraction.value)

    @cached_property
    def memory(self) -> sizing.TrainingMemory | None:
        w = self.blueprint.workload
        if not self.training or w is None or not self.gpu_groups:
            return None
        return sizing.training_memory(w, self.gpus, self.figures.memory)

    @cached_property
    def serving(self) -> sizing.ServingMemory | None:
        w = self.blueprint.workload
        if self.training or w is None:
            return None
        return sizing.serving_memory(w, self.figures.memory)

    @cached_property
    def array(self) -> ArrayPlan | None:
        """The slowest node's checkpoint array (a synchronous checkpoint waits for it), or None
        when the write speed of some node's array is unknown."""
        # Nodes with GPUs (the testbed's CPU-only nodes where there are none); a parked group
        # (count: 0) has no array to wait for.
        groups = [g for _, g, _ in self.gpu_groups] or [
            g for g in self.plan.node_groups if g.count > 0
        ]
        arrays = [g.array for g in groups]
        if not arrays or any(a.write_gbps is None for a in arrays):
            return None
        return min(arrays, key=lambda a: a.write_gbps)


def group_path(ctx: Context, index: int) -> Path:
    """The field that chose a group's GPU: instance_type on AWS, gpu elsewhere."""
    field = "instance_type" if ctx.plan.node_groups[index].instance else "gpu"
    return ("node_groups", index, field)


def gb(value: float) -> str:
    """GB for messages: 0.64 GB, 16.4 GB, 1120 GB."""
    if value >= 100:
        return f"{value:,.0f} GB"
    return f"{value:.1f} GB" if value >= 1 else f"{value:.2f} GB"
