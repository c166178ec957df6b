"""A cluster's node-lifecycle figures (time to repair, between failures: `lifecycle.repairs`) in
Prometheus's text exposition format, for node_exporter's textfile collector: the way rackform
already exports a job's heartbeat (`validators/heartbeat.py`). The file is replaced whole by a
rename, so the collector never reads half of it.

Every series carries the cluster's three labels (`cluster`, `environment`, `purpose`, as the
`dcgm` role's scrape config names them), so a Prometheus scraping the controller's node_exporter
keeps them apart: scrape it in a job whose targets carry no label of those names (or with
`honor_labels: true`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rackform.lifecycle.repairs import Reliability
from rackform.scheduler.usage import Usage
from rackform.telemetry import labels as L


@dataclass(frozen=True)
class Measured:
    """One cluster's figures and its identity among the series."""

    key: L.Key
    reliability: Reliability
    usage: Usage | None = None  # the jobs' GPU-hours and cost, where their records were given


# name -> (type, help), in the file's order.
FAMILIES = {
    L.LIFECYCLE_FAILURES: ("counter", "Node failures detected (heal, a failed re-validation)."),
    L.LIFECYCLE_REPAIRS: ("counter", "Failures whose node's return to service is recorded."),
    L.LIFECYCLE_REPAIR_SECONDS: ("counter", "Seconds from detection to return, summed."),
    L.LIFECYCLE_OPEN: ("gauge", "Failed nodes not recorded as returned to service."),
    L.LIFECYCLE_MTTR: ("gauge", "Mean time to repair over the audit log, in seconds."),
    L.LIFECYCLE_TBF: ("gauge", "Mean time between failures in the cluster, in seconds."),
    L.LIFECYCLE_MAINTENANCE_SECONDS: ("counter", "Node-seconds out for rolling changes."),
    L.LIFECYCLE_NODE_FAILURES: ("counter", "Failures detected on the node."),
    L.LIFECYCLE_NODE_MTTR: ("gauge", "The node's mean time to repair, in seconds."),
    L.JOBS_ACCOUNT_GPU_SECONDS: ("gauge", "GPU-seconds of the team's jobs in the records given."),
    L.JOBS_ACCOUNT_USD: ("gauge", "Their cost at the catalog's price per GPU-hour."),
}


def escape(value: str) -> str:
    """A label value as the exposition format writes it: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(key: L.Key, node: str | None = None, account: str | None = None) -> str:
    pairs = [(L.CLUSTER, key.cluster), (L.ENVIRONMENT, key.environment), (L.PURPOSE, key.purpose)]
    if node is not None:
        pairs.append((L.NODE, node))
    if account is not None:
        pairs.append((L.ACCOUNT, account))
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs) + "}"


def _samples(m: Measured) -> dict[str, list[str]]:
    r, lab = m.reliability, _labels(m.key)
    out: dict[str, list[str]] = {name: [] for name in FAMILIES}
    out[L.LIFECYCLE_FAILURES].append(f"{lab} {len(r.failures)}")
    out[L.LIFECYCLE_REPAIRS].append(f"{lab} {len(r.repaired)}")
    out[L.LIFECYCLE_REPAIR_SECONDS].append(f"{lab} {r.repair_seconds:.3f}")
    out[L.LIFECYCLE_OPEN].append(f"{lab} {len(r.open)}")
    if r.mttr_s is not None:  # no repair recorded: no figure (never 0)
        out[L.LIFECYCLE_MTTR].append(f"{lab} {r.mttr_s:.3f}")
    if r.tbf_s is not None:
        out[L.LIFECYCLE_TBF].append(f"{lab} {r.tbf_s:.3f}")
    out[L.LIFECYCLE_MAINTENANCE_SECONDS].append(f"{lab} {r.maintenance_seconds:.3f}")
    for n in r.nodes():
        out[L.LIFECYCLE_NODE_FAILURES].append(f"{_labels(m.key, n.node)} {n.failures}")
        if n.mttr_s is not None:
            out[L.LIFECYCLE_NODE_MTTR].append(f"{_labels(m.key, n.node)} {n.mttr_s:.3f}")
    for a in m.usage.accounts if m.usage is not None else ():
        lab = _labels(m.key, account=a.account)
        out[L.JOBS_ACCOUNT_GPU_SECONDS].append(f"{lab} {a.gpu_hours * 3600:.0f}")
        if a.usd is not None:
            out[L.JOBS_ACCOUNT_USD].append(f"{lab} {a.usd:.2f}")
    return out


def exposition(measured: Iterable[Measured]) -> str:
    """Every cluster's series, each family once with its HELP and TYPE."""
    by: dict[str, list[str]] = {name: [] for name in FAMILIES}
    for m in measured:
        for name, lines in _samples(m).items():
            by[name] += lines
    text = []
    for name, (kind, help_) in FAMILIES.items():
        if by[name]:
            text += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            text += [f"{name}{line}" for line in by[name]]
    return "\n".join(text) + "\n"


class TextfileError(Exception):
    """The file cannot be written where it was asked: one line."""


def write(path: Path, text: str) -> None:
    """`text` into `path` (a `.prom` file: the collector reads no other), replaced whole."""
    if path.suffix != ".prom":
        raise TextfileError(f"{path}: node_exporter's textfile collector reads only *.prom files")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise TextfileError(f"{path}: cannot write there ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # node_exporter runs as its own user
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise TextfileError(f"{path}: cannot write there ({exc.strerror})") from None
