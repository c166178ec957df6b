"""The rackform.gpu collection as tests read it: its directories, and its modules imported by
their collection names (`ansible_collections.rackform.gpu.plugins.modules.X`), as Ansible
imports them, so a module's `module_utils` import is the one it makes on a host."""

from __future__ import annotations

import importlib

import ansible_collections

from rackform.paths import COLLECTION, ROLES_DIR, SITE, VALIDATORS_DIR

__all__ = ["COLLECTION", "ROLES_DIR", "SITE", "VALIDATORS_DIR", "module"]

# `ansible_collections` is a namespace package (the `ansible` distribution installs one
# portion); this package's collection is another.
_PORTION = str(COLLECTION.parents[1])
if _PORTION not in list(ansible_collections.__path__):
    ansible_collections.__path__.append(_PORTION)


def module(name: str):
    """The collection's module `name` (e.g. "nvme_raid_probe"), imported."""
    return importlib.import_module(f"ansible_collections.rackform.gpu.plugins.modules.{name}")
