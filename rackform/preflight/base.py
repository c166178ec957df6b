"""What a preflight rule is, what it finds, and what it looks at.

In the manner of aws-parallelcluster's validators: one small class per rule, each with a
stable code and a level, each finding naming the blueprint field, what is wrong (with the
numbers) and how to fix it. Rules read a `Context`: the effective blueprint, its compiled
spec, the catalog and the preflight figures, and never touch the network or a disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Literal

from rackform.catalog import Catalog, GpuModel, load_catalog
from rackform.catalog.preflight import PreflightFigures, load_preflight_figures
from rackform.compile import compile_cluster
from rackform.loader import Effective
from rackform.preflight import sizing
from rackform.schema import Blueprint
from rackform.spec import ClusterSpec, NodeGroupSpec
from rackform.yamlmap import Path

Level = Literal["error", "warning"]
ERROR: Level = "error"
WARNING: Level = "warning"
RDMA = ("efa", "infiniband", "roce")


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
    """One check. Subclasses set `code`, `level` and `summary` and implement `check`."""

    code: ClassVar[str]
    level: ClassVar[Level]
    summary: ClassVar[str]  # one line, for the README and `--help`

    def check(self, ctx: Context) -> Iterable[Finding]:
        raise NotImplementedError

    def finding(self, path: Path, message: str, fix: str) -> Finding:
        return Finding(self.level, self.code, path, message, fix)


@dataclass
class Context:
    """Everything a rule may read about one effective blueprint."""

    effective: Effective
    catalog: Catalog
    figures: PreflightFigures

    @classmethod
    def of(cls, effective: Effective) -> Context:
        return cls(effective, load_catalog(), load_preflight_figures())

    @property
    def blueprint(self) -> Blueprint:
        return self.effective.blueprint

    @cached_property
    def spec(self) -> ClusterSpec:
        return compile_cluster(self.effective)

    @property
    def training(self) -> bool:
        return self.blueprint.purpose == "training"

    @cached_property
    def gpu_groups(self) -> list[tuple[int, NodeGroupSpec, GpuModel]]:
        """(index in node_groups, group, GPU model) for every group with GPUs."""
        out = []
        for i, g in enumerate(self.spec.node_groups):
            model = self.catalog.gpus.get(g.gpu or "")
            if model is not None and g.gpus_per_node > 0 and g.count > 0:
                out.append((i, g, model))
        return out

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
    def array(self) -> sizing.ArraySpeed | None:
        groups = tuple(g for _, g, _ in self.gpu_groups) or self.spec.node_groups
        return sizing.array_speed(groups, self.spec.checkpoint, self.catalog)


def group_path(ctx: Context, index: int) -> Path:
    """The field that chose a group's GPU: instance_type on AWS, gpu elsewhere."""
    field = "instance_type" if ctx.spec.node_groups[index].instance_type else "gpu"
    return ("node_groups", index, field)


def gb(value: float) -> str:
    """GB for messages: 0.64 GB, 16.4 GB, 1120 GB."""
    if value >= 100:
        return f"{value:,.0f} GB"
    return f"{value:.1f} GB" if value >= 1 else f"{value:.2f} GB"
