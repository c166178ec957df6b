"""The names reap, heal and the alert rules select dcgm-exporter's series by, and a cluster's
identity among them. The label names are the
ones the `dcgm` role's Prometheus scrape config writes on every target (a test holds the two
together); `gpu` is dcgm-exporter's own."""

from __future__ import annotations

from dataclasses import dataclass

CLUSTER = "cluster"
ENVIRONMENT = "environment"
PURPOSE = "purpose"
NODE = "node"
GPU = "gpu"

# The labels the role writes, in its order.
SCRAPE_LABELS = (CLUSTER, ENVIRONMENT, PURPOSE, NODE)

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent, 0-100
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB of framebuffer in use
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"  # the last XID error code seen (0: none)
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"  # uncorrectable (double-bit) ECC errors
ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"  # pending row remaps (not in the role's
# default counters: the rule is inert until it is added to dcgm_exporter_counters)
# A job's progress: the unix time of its last completed step, per node, carrying the scrape
# labels. The smoke job writes it (the validators' heartbeat); a user's job exports the same gauge.
HEARTBEAT = "rackform_job_heartbeat_timestamp_seconds"

# A GPU is one series however its other labels change (a re-addressed node's `instance`, a new
# driver's version label): every statistic is aggregated by these, in PromQL.
GPU_ID = (CLUSTER, ENVIRONMENT, PURPOSE, NODE, GPU)
NODE_ID = (CLUSTER, ENVIRONMENT, PURPOSE, NODE)


@dataclass(frozen=True)
class Key:
    """A cluster's series: the values of its three scrape labels."""

    cluster: str
    environment: str
    purpose: str


def selector(**match: str) -> str:
    """`{cluster="a",environment="dev"}` with values quoted for PromQL."""
    inner = ",".join(f"{k}={quote(v)}" for k, v in match.items())
    return "{" + inner + "}"


def one_of(label: str, values: list[str] | set[str] | tuple[str, ...]) -> str:
    """A matcher for any of `values`, exactly: `label="v"` for one, else an anchored RE2
    alternation. Each value is escaped for RE2 first, then quoted as a PromQL string: Python's
    re.escape is not that (it writes `\\-`, an escape PromQL strings reject)."""
    vals = sorted(set(values))
    if len(vals) == 1:
        return f"{label}={quote(vals[0])}"
    return f"{label}=~{quote('|'.join(re2_escape(v) for v in vals))}"


# RE2's metacharacters (github.com/google/re2/wiki/Syntax); everything else stands for itself.
_RE2_META = set("\\.+*?()|[]{}^$")


def re2_escape(value: str) -> str:
    return "".join("\\" + c if c in _RE2_META else c for c in value)


def quote(value: str) -> str:
    """A PromQL string literal: double quotes, with backslash and quote escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# What rackform exports of a cluster's node lifecycle, measured from its audit log
# (`rackform metrics`, node_exporter's textfile collector), each carrying the cluster's three
# labels (and `node` where per node). The alert rules and the Grafana dashboards select by them.
LIFECYCLE_FAILURES = "rackform_lifecycle_failures_total"  # failures detected, ever
LIFECYCLE_REPAIRS = "rackform_lifecycle_repairs_total"  # failures whose return is recorded
LIFECYCLE_REPAIR_SECONDS = "rackform_lifecycle_repair_seconds_total"  # their detection to return
LIFECYCLE_OPEN = "rackform_lifecycle_open_failures"  # failed nodes not recorded as returned
LIFECYCLE_MTTR = "rackform_lifecycle_mttr_seconds"  # mean time to repair over the whole log
LIFECYCLE_TBF = "rackform_lifecycle_tbf_seconds"  # mean time between failures (any node)
LIFECYCLE_MAINTENANCE_SECONDS = "rackform_lifecycle_maintenance_seconds_total"  # planned, rollouts
LIFECYCLE_NODE_FAILURES = "rackform_lifecycle_node_failures_total"  # per node
LIFECYCLE_NODE_MTTR = "rackform_lifecycle_node_mttr_seconds"  # per node
# With job records (`rackform metrics --jobs`): per team (Slurm account, `account` label).
JOBS_ACCOUNT_GPU_SECONDS = "rackform_jobs_account_gpu_seconds"
JOBS_ACCOUNT_USD = "rackform_jobs_account_usd"
ACCOUNT = "account"
