"""`ansible-test sanity` on the rackform.gpu collection, in its `--venv` mode (no containers) on
this interpreter's Python only (the controller's; the nodes' Pythons are 3.10 to 3.12).

ansible-test needs the collection at a path ending in ansible_collections/rackform/gpu and
writes tests/output/ into it, so it runs on a copy in a temporary directory, never on the
package. It runs every sanity test that has targets here: validate-modules (each module's
DOCUMENTATION / EXAMPLES / RETURN against its argument_spec), pylint, pep8, compile, import,
shebang, yamllint, ansible-doc, runtime-metadata, line endings, smart quotes and the other
code-smell checks, over the modules, module_utils and the validators shipped in smoke_train's
files. Nothing is ignored: the collection has no tests/sanity/ignore-*.txt (the modules'
headers say they are Apache-2.0, not GPLv3, in the words validate-modules looks for).

Each test's virtualenv is made once and cached by ansible-test under its home's .ansible/test/venv
(about 2 minutes the first time, from the package index; about 30 s a run after that). Its home
is a directory in rackform's cache (HOME set for it), never the user's ~/.ansible: another
ansible-test on the machine (a second run of the suite, a developer's own) would share those
virtualenvs and their cache, and one run failed there while another made them. ansible-test
puts pip into each one with get-pip.py, which it downloads from ci-files.testing.ansible.com,
out of reach here; when that script is not already in ansible-test's cache, an offline stand-in
that does the same (tests/collection/get_pip_offline.py) is put there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpu_collection import COLLECTION

from rackform.paths import cache_dir

BIN = Path(sys.executable).parent
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
STAND_IN = Path(__file__).with_name("get_pip_offline.py")


def ansible_test_home() -> Path:
    """The home ansible-test runs with: its own, in this run's cache (.ci/run's is new)."""
    return cache_dir() / "ansible-test-home"


# The checks that have targets in this collection; each must have run.
EXPECTED = [
    "ansible-doc", "compile", "import", "line-endings", "no-smart-quotes", "pep8", "pylint",
    "runtime-metadata", "shebang", "validate-modules", "yamllint",
]  # fmt: skip


def ensure_get_pip() -> Path:
    """ansible-test's cached pip bootstrap script: the real one if it is there, else the
    offline stand-in."""
    version = subprocess.run(
        [sys.executable, "-c",
         "import types; from ansible_test._internal.python_requirements import get_venv_packages;"
         f" print(get_venv_packages(types.SimpleNamespace(version='{PYTHON}'))['pip'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    name = f"get_pip_{version.replace('.', '_')}.py"
    cached = ansible_test_home() / ".ansible" / "test" / "cache" / name
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(STAND_IN, cached)
    return cached


def test_ansible_test_sanity_passes(tmp_path):
    # An ignore file would let sanity pass with findings left in: there must be none.
    assert not sorted(COLLECTION.glob("tests/sanity/ignore-*.txt"))
    ensure_get_pip()
    copy = tmp_path / "ansible_collections" / "rackform" / "gpu"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(ansible_test_home()),
    }
    start = time.monotonic()
    proc = subprocess.run(
        [BIN / "ansible-test", "sanity", "--venv", "--python", PYTHON, "--color", "no"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    problems = [line for line in out.splitlines() if line.startswith(("ERROR", "FATAL"))]
    assert proc.returncode == 0, "\n".join(problems) or out[-6000:]
    for name in EXPECTED:
        assert f'Running sanity test "{name}"' in out, f"{name} did not run:\n{out[-3000:]}"
    # Its virtualenvs are where this run keeps its state, not in the user's home.
    assert (ansible_test_home() / ".ansible" / "test" / "venv").is_dir()
    print(f"ansible-test sanity --venv --python {PYTHON}: {took:.0f} s")
