"""The wheel carries the Ansible collection rackform.gpu inside the package
(rackform/ansible_collections/rackform/gpu/), written at build time from the repository's one
copy of its files: roles/, validators/ and collection/ (rackform/collection.py says what goes
where; MANIFEST.in puts them in the sdist, which the wheel is built from). Everything else about
the package is in pyproject.toml."""

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _collection():
    # rackform/collection.py by its path: the package's dependencies are not in the build
    # environment, and the module needs none of them.
    spec = importlib.util.spec_from_file_location(
        "_rackform_collection", HERE / "rackform" / "collection.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithCollection(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return  # a checkout runs the collection from its build/ (rackform.paths)
        collection = _collection()
        if not collection.is_source(HERE):
            raise SystemExit(
                f"rackform: the collection's sources (collection/, roles/) are not in {HERE}"
            )
        dest = Path(self.build_lib) / "rackform" / "ansible_collections" / "rackform" / "gpu"
        shutil.rmtree(dest, ignore_errors=True)
        collection.write(HERE, dest)


setup(cmdclass={"build_py": BuildWithCollection})
