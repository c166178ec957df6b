"""The rackform.gpu collection as tests read it: its directories as rackform runs it (in a
checkout: build/ansible_collections/rackform/gpu, made from roles/, validators/ and
collection/), and its modules imported by their collection names
(`ansible_collections.rackform.gpu.plugins.modules.X`), as Ansible imports them, so a module's
`module_utils` import is the one it makes on a host."""

from __future__ import annotations

import importlib
import sys

from rackform import paths

__all__ = [
    "COLLECTION",
    "COLLECTIONS_ROOT",
    "ROLES_DIR",
    "SITE",
    "VALIDATORS_DIR",
    "module",
    "module_util",
]

COLLECTIONS_ROOT = paths.collections_root()
COLLECTION = paths.collection()
ROLES_DIR = COLLECTION / "roles"
SITE = paths.site()
VALIDATORS_DIR = paths.validators_dir()


def _collection_loader() -> None:
    """Ansible's own collection loader over this package's collections root (and, as Ansible
    does, the `ansible_collections` of sys.path: ansible.posix, community.general), the way
    ansible-test's pytest plugin sets it up for a collection's unit tests. `ansible_collections`
    is not a plain namespace package once any Ansible code has installed its loader."""
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    current = AnsibleCollectionConfig.collection_finder
    if current is not None and str(COLLECTIONS_ROOT) in current._n_collection_paths:
        return
    if current is not None:
        current._remove()
    else:
        # An `ansible_collections` imported before any loader (building a bootstrap artifact
        # looks up where ansible.posix is installed) is a plain namespace package without this
        # root: forgotten, so the loader's own takes its place.
        for name in [m for m in sys.modules if m.split(".")[0] == "ansible_collections"]:
            del sys.modules[name]
    _AnsibleCollectionFinder(paths=[str(COLLECTIONS_ROOT)])._install()


def module(name: str):
    """The collection's module `name` (e.g. "nvme_raid_probe"), imported."""
    _collection_loader()
    return importlib.import_module(f"ansible_collections.rackform.gpu.plugins.modules.{name}")


def module_util(name: str):
    """The collection's module_utils `name` (e.g. "nvme_raid_plan"), imported as its modules
    import it."""
    _collection_loader()
    return importlib.import_module(f"ansible_collections.rackform.gpu.plugins.module_utils.{name}")
