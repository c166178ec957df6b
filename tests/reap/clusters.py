"""Blueprints and their dcgm-exporter history for the reap tests and benchmark: bare-metal
clusters of two hosts with two GPUs each, named by what their history shows."""

from __future__ import annotations

import textwrap
from pathlib import Path

from servers import Gpu

GPUS_PER_NODE = 2


def bare_metal(
    name: str,
    *,
    action: str = "notify",
    window: int = 60,
    protect: bool = False,
    stalled: str = "report",
    bmcs: dict[str, tuple[str, str]] | None = None,  # host -> (Redfish system, password env)
    bmc_url: str = "http://127.0.0.1:1",
    hosts: int = 2,
    grace: int = 0,
    environment: str | None = None,
) -> str:
    lines = []
    for i in range(hosts):
        host = f"{name}-{i}"
        line = f"      - {{name: {host}, address: 10.77.{len(name)}.{i + 1}"
        if bmcs and host in bmcs:
            system, password_env = bmcs[host]
            line += (
                f", bmc: {{address: '{bmc_url}', system: {system}, "
                f"username_env: BMC_USER, password_env: {password_env}}}"
            )
        lines.append(line + "}")
    return (
        textwrap.dedent(f"""\
        name: {name}
        purpose: training
        owner: ops@example.com
        target: {{type: bare_metal, capex_usd_per_gpu: 30000, amortize_months: 36}}
        node_groups:
          - name: gpu
            gpu: H100-SXM
            gpus_per_node: {GPUS_PER_NODE}
            hosts:
        """)
        + "\n".join(lines)
        + textwrap.dedent(f"""
        network: {{fabric: ethernet}}
        lifecycle:
          protect: {str(protect).lower()}
          idle: {{gpu_util_below_pct: 10, for_minutes: {window}, action: {action}, stalled: {stalled},
                  grace_minutes: {grace}, power_off_timeout_s: 60}}
        """)
        + (f"environments:\n  {environment}: {{}}\n" if environment else "")
    )


def history(name: str, util, fb=0.0, environment: str = "default", **kw) -> list[Gpu]:
    """Every GPU of the cluster `name` with the same history; kw as Gpu's."""
    return [
        Gpu(name, environment, "training", f"{name}-{i}", g, util, fb, **kw)
        for i in range(2)
        for g in range(GPUS_PER_NODE)
    ]


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path
