"""NVIDIA's XID catalog as data (the catalog's `xid.yaml`) and the action each code asks of
`rackform heal`: the catalog's immediate-action bucket made into a heal action, unless the
blueprint's policy names the code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from rackform.catalog import CatalogError, _read

# NVIDIA's buckets, as heal acts on them. The application's own errors (RESTART_APP) and
# recorded events (IGNORE) leave the node in service, named; a GPU reset clears what a reset
# clears (RESET_GPU, and NVIDIA's workflows for double-bit ECC and NVLink errors start with
# one); RESTART_BM is a reboot of the machine; what NVIDIA sends to support or to the hardware
# (power connectors, an unexpected error) is a drain with a person's ticket.
BUCKET_ACTIONS: dict[str, str] = {
    "IGNORE": "monitor",
    "RESTART_APP": "monitor",
    "WORKFLOW_XID_45": "monitor",
    "RESET_GPU": "reset",
    "WORKFLOW_XID_48": "reset",
    "WORKFLOW_NVLINK_ERR": "reset",
    "WORKFLOW_NVLINK5_ERR": "reset",
    "RESTART_BM": "reboot",
    "CHECK_MECHANICALS": "drain",
    "UNEXPECTED_ERR_REPORT_ISSUE": "drain",
    "CONTACT_SUPPORT": "drain",
}


@dataclass(frozen=True)
class Xid:
    code: int
    name: str
    meaning: str
    bucket: str

    @property
    def action(self) -> str:
        return BUCKET_ACTIONS[self.bucket]


@cache
def catalog() -> dict[int, Xid]:
    doc = _read("xid.yaml")
    if doc.get("source") not in (doc.get("sources") or {}):
        raise CatalogError("xid.yaml: `source` is not in `sources`")
    out = {}
    for code, raw in (doc.get("codes") or {}).items():
        if raw.get("bucket") not in BUCKET_ACTIONS:
            raise CatalogError(f"xid.yaml:{code}: unknown bucket {raw.get('bucket')!r}")
        out[int(code)] = Xid(int(code), raw["name"], raw["meaning"], raw["bucket"])
    return out


def action(code: int, overrides: Mapping[int, str]) -> tuple[str, str]:
    """(action, why) for an XID code: the policy's, else NVIDIA's, else `monitor` for a code
    the catalog does not know (the why says so: heal warns about it)."""
    known = catalog().get(code)
    if code in overrides:
        what = f"XID {code}" + (f" ({known.meaning})" if known else "")
        return overrides[code], f"{what}: the health policy's action"
    if known is None:
        return "monitor", f"XID {code} is not in NVIDIA's catalog as rackform has it: monitor"
    return known.action, f"XID {code} ({known.meaning}): NVIDIA's {known.bucket}"
