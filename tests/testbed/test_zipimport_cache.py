"""The testbed image's bytecode cache for zip imports (guest/rackform_zipimport_cache.py), run
under this machine's CPython (3.11, as on the VMs) in a fresh interpreter each time: the second
import of the same source from another zip compiles nothing, and still reports the zip it was
imported from; changed source is compiled again; a broken or unwritable cache only costs the
compile."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

GUEST = Path(__file__).resolve().parents[2] / "rackform" / "testbed" / "guest"

MOD = """VALUE = {value!r}


def boom():
    raise RuntimeError("boom")
"""

PROBE = """
import json, sys, traceback
sys.path.insert(0, {guest!r})
import rackform_zipimport_cache as cache
cache.CACHE_DIR = {cache!r}
compiled = []
original = cache._compile_source
cache._compile_source = lambda path, src: compiled.append(path) or original(path, src)
sys.path.insert(0, {zip!r})
import pkg.mod
try:
    pkg.mod.boom()
except RuntimeError as e:
    where = traceback.extract_tb(e.__traceback__)[-1].filename
print(json.dumps({{"value": pkg.mod.VALUE, "file": pkg.mod.__file__, "raised_in": where,
                  "compiled": [p.rsplit("/", 1)[-1] for p in compiled]}}))
"""


def make_zip(path: Path, value: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/mod.py", MOD.format(value=value))
    return path


def load(zip_path: Path, cache: Path) -> dict:
    code = PROBE.format(guest=str(GUEST), cache=str(cache), zip=str(zip_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def test_a_second_import_from_another_zip_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    first = load(make_zip(tmp_path / "a.zip", "one"), cache)
    assert first["compiled"] == ["__init__.py", "mod.py"]
    assert len(list(cache.iterdir())) == 2

    second = load(make_zip(tmp_path / "b.zip", "one"), cache)
    assert second["compiled"] == [] and second["value"] == "one"
    # The cached code names the zip it came from this time, in tracebacks too.
    assert second["file"] == second["raised_in"] == str(tmp_path / "b.zip" / "pkg" / "mod.py")


def test_changed_source_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    load(make_zip(tmp_path / "a.zip", "one"), cache)
    changed = load(make_zip(tmp_path / "b.zip", "two"), cache)
    assert changed["compiled"] == ["mod.py"] and changed["value"] == "two"


def test_a_broken_or_unwritable_cache_only_costs_the_compile(tmp_path):
    cache = tmp_path / "cache"
    load(make_zip(tmp_path / "a.zip", "one"), cache)
    for entry in cache.iterdir():
        entry.write_bytes(b"not marshal data")
    again = load(make_zip(tmp_path / "b.zip", "one"), cache)
    assert again["compiled"] == ["__init__.py", "mod.py"] and again["value"] == "one"

    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    nowhere = load(make_zip(tmp_path / "c.zip", "three"), blocked / "cache")
    # With nothing kept, CPython 3.11's zipimport compiles each module twice per import
    # (spec_from_loader asks get_filename, which compiles; then get_code compiles again).
    assert nowhere["compiled"] == ["__init__.py", "__init__.py", "mod.py", "mod.py"]
    assert nowhere["value"] == "three"
