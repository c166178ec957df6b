"""Every target rackform knows, by its `type`. A new target is one package under
`rackform/targets/` with an `adapter.py`, and one line here."""

from __future__ import annotations

from rackform.targets.aws.adapter import ADAPTER as AWS
from rackform.targets.bare_metal.adapter import ADAPTER as BARE_METAL
from rackform.targets.base import Adapter
from rackform.targets.colocation.adapter import ADAPTER as COLOCATION

ADAPTERS: dict[str, Adapter] = {a.type: a for a in (AWS, BARE_METAL, COLOCATION)}


def adapter(target_type: str) -> Adapter:
    return ADAPTERS[target_type]
