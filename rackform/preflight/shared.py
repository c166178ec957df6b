"""The data tier's rules (storage.shared), before anything is bought: can it feed the GPUs, and
can it take a checkpoint in time.

data rate = tokens the cluster's GPUs consume per second x bytes read per token, where tokens/s =
the GPUs' bf16 dense peak x the catalog's MFU / (training FLOPs per parameter per token x
parameters); the tier's throughput = FSx for Lustre's capacity x per-unit throughput, or the
figure declared for an existing server. A training job should need at most the catalog's share
of it (`shared.read_headroom_fraction`): checkpoints, other jobs and metadata share the tier.
A checkpoint written to the tier takes size / its write throughput (every node's shard goes
through the one file system), against the same 10 s rule as the node's array."""

from __future__ import annotations

from collections.abc import Iterable

from rackform.plan.model import Plan
from rackform.plan.shared import data_rate
from rackform.preflight.base import Finding, Rule, gb


def _rate(gbps: float) -> str:
    return f"{gbps * 1000:,.0f} MB/s" if gbps < 1 else f"{gbps:,.1f} GB/s"


class SharedReadSlow(Rule):
    code = "shared-read-slow"

    def check(self, plan: Plan) -> Iterable[Finding]:
        s, rate = plan.shared, data_rate(plan)
        if s is None or "datasets" not in s.holds or rate is None or s.read_gbps is None:
            return
        share = plan.figures.shared.read_headroom_fraction.value
        if rate.gbps <= s.read_gbps * share:
            return
        w = plan.workload
        yield self.finding(
            ("workload", "read_bytes_per_token"),
            f"the GPUs consume about {rate.tokens_per_s:,.0f} tokens/s at"
            f" {plan.figures.cost.mfu_fraction.value:.0%} MFU, reading"
            f" {w.read_bytes_per_token:g} bytes a token: {_rate(rate.gbps)} from {s.describe()},"
            f" which delivers {_rate(s.read_gbps)} ({rate.gbps / s.read_gbps:.0%} of it; keep"
            f" data loading under {share:.0%}): the GPUs wait for data",
            "give the tier more throughput (FSx: more capacity or a higher mbps_per_tib), cache"
            " the dataset on the nodes' NVMe, or store it more compactly",
        )


class SharedCheckpointSlow(Rule):
    code = "shared-checkpoint-slow"

    def check(self, plan: Plan) -> Iterable[Finding]:
        s, size = plan.shared, plan.sizing.checkpoint_gb
        if s is None or "checkpoints" not in s.holds or size is None or s.write_gbps is None:
            return
        seconds = size / s.write_gbps
        limit = plan.figures.checkpoint.max_seconds.value
        if seconds <= limit:
            return
        yield self.finding(
            ("storage", "shared", "holds"),
            f"a {gb(size)} checkpoint through {s.describe()} at {_rate(s.write_gbps)} takes"
            f" {seconds:,.0f} s (rule of thumb: {limit:g} s or less); the GPUs wait that long"
            " every checkpoint unless it is asynchronous",
            "write checkpoints to the nodes' NVMe array and copy them to the shared tier in the"
            " background, or give the tier more throughput",
        )


class SharedThroughputUnknown(Rule):
    code = "shared-throughput-unknown"

    def check(self, plan: Plan) -> Iterable[Finding]:
        s = plan.shared
        if s is None or s.server is None:
            return
        missing = []
        if "datasets" in s.holds and s.server.read_gbps is None and data_rate(plan):
            missing.append("read_gbps (data loading)")
        if "checkpoints" in s.holds and s.server.write_gbps is None and plan.sizing.checkpoint_gb:
            missing.append("write_gbps (checkpoints)")
        if missing:
            yield self.finding(
                ("storage", "shared", "server"),
                f"{s.describe()}'s throughput is unknown, so it was not checked against the"
                f" workload: {' and '.join(missing)}",
                "declare what the server delivers to the whole cluster (measured, or the"
                " vendor's figure): storage.shared.server.read_gbps / write_gbps",
            )


RULES: tuple[Rule, ...] = (SharedReadSlow(), SharedCheckpointSlow(), SharedThroughputUnknown())
