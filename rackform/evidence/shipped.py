"""What of the collection reaches the nodes, as one hash: what the Configure stage reruns on,
and what a promotion pins (`pin`). Its own module so both read the same
function without the promotion code importing the stages."""

from __future__ import annotations

import hashlib
from pathlib import Path

# What of the collection reaches the nodes: its roles (with the validators in smoke_train's
# files), its modules and module_utils, and the site playbook. Its README, changelog and
# galaxy.yml do not, so editing them reruns nothing.
SHIPPED = ("roles", "plugins", "playbooks")


def roles_hash(collection: Path) -> str:
    """sha256 over every file the collection runs on nodes (relative path and bytes), in a
    stable order; byte-compiled caches are left out."""
    h = hashlib.sha256()
    for top in SHIPPED:
        base = collection / top
        if not base.is_dir():
            continue
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            rel = path.relative_to(collection).as_posix()
            if "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + h.hexdigest()
