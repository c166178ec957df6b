"""The names reap and the alert rules select dcgm-exporter's series by. The label names are the
ones the `dcgm` role's scrape config writes on every target (roles/dcgm/templates/
prometheus-scrape.yml.j2; a test holds the two together); `gpu` is dcgm-exporter's own."""

from __future__ import annotations

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


def selector(**match: str) -> str:
    """`{cluster="a",environment="dev"}` with values quoted for PromQL."""
    inner = ",".join(f"{k}={_quote(v)}" for k, v in match.items())
    return "{" + inner + "}"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
