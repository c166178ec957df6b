"""Whether a node's image holds what its blueprint's roles would install: the check a node
that configures itself makes at boot, before it runs the roles.

A baked image records, in /etc/rackform/image.json, the roles' hash it was built with and the
site playbook's tags it ran (the plan's `baked_tags`; written by the bake script on the
builder). The node's artifact carries the same record for the blueprint it belongs to (the
`image` key of its bootstrap.json). The same roles hash: the image has what those tags install,
and the node's run may skip them (`ansible_env`). Anything else (another hash, no record, an
unreadable one) and the node is configured in full, with a WARNING line naming both hashes.

Standard library only, and Python 3.10 (Ubuntu 22.04's): it runs on the node, beside the node
script, where nothing of rackform is installed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORD = Path("/etc/rackform/image.json")


@dataclass(frozen=True)
class ImageCheck:
    skip: tuple[str, ...]  # the site playbook's tags the image holds already (none: run in full)
    warning: str  # "" or one line saying why the node is configured in full


def check(expected: Mapping[str, Any] | None, record: Path = RECORD) -> ImageCheck:
    """`expected`: the artifact's `image` record (None: the blueprint bakes no image, and the
    node is configured in full without a word)."""
    if not expected:
        return ImageCheck((), "")
    want = str(expected.get("roles") or "")
    try:
        found = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        found = None
        why = f"{record} is missing"
    except (OSError, ValueError) as exc:
        found = None
        why = f"{record} is unreadable ({exc})"
    if found is not None and not isinstance(found, dict):
        found, why = None, f"{record} holds no record"
    if found is not None:
        have = str(found.get("roles") or "")
        if have == want:
            baked = [t for t in found.get("tags") or () if t in (expected.get("tags") or ())]
            return ImageCheck(tuple(baked), "")
        why = f"the image was baked with roles {have or '(none)'}"
    return ImageCheck(
        (),
        f"WARNING: the node image does not match the blueprint ({why}; the blueprint's roles "
        f"are {want}): configuring in full",
    )


def ansible_env(result: ImageCheck) -> dict[str, str]:
    """The environment the node's ansible-playbook runs with: the baked tags skipped
    (ANSIBLE_SKIP_TAGS, Ansible's TAGS_SKIP setting), nothing where it runs in full."""
    return {"ANSIBLE_SKIP_TAGS": ",".join(result.skip)} if result.skip else {}
