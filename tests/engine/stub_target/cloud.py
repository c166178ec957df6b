"""The stub cloud: what the stub target's machines are now, in a JSON file the test writes
($STUB_CLOUD), as a real target reads its API. For each stack: its running machines by node
group ([[name, address, port, machine id]]), its live tags (`protect`), when its oldest machine
started; and every action carried out on it (`acts`), so a test sees what was done."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def path() -> Path:
    return Path(os.environ["STUB_CLOUD"])


def read() -> dict[str, Any]:
    return json.loads(path().read_text())


def write(doc: dict[str, Any]) -> None:
    path().write_text(json.dumps(doc, indent=2))


def cluster(stack: str) -> dict[str, Any] | None:
    return read()["clusters"].get(stack)
