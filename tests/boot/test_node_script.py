"""The node's bootstrap script as it ships: the node package's modules joined into one file that a
Python with nothing but its standard library imports and runs, the same bytes every time."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import tarfile
import textwrap

import pytest

from rackform.boot import node_script
from rackform.boot.artifact import build_artifact, manifest
from rackform.boot.node import converge, machine
from rackform.boot.node_script import MODULES, PACKAGE, SOURCES, ScriptError, script

# What the shipped file may import besides the standard library: files the artifact carries
# beside it (the image check) and in its collection (the validators), imported where used.
SHIPPED_BESIDE = {"image_check", "validators"}


def test_every_module_of_the_package_is_in_the_script_in_an_order_that_defines_before_use():
    assert set(MODULES) == {p.stem for p in SOURCES.glob("*.py")} - {"__init__"}
    defined: dict[str, set[str]] = {}
    for name in MODULES:
        tree = ast.parse((SOURCES / f"{name}.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                other = node.module.rsplit(".", 1)[-1]
                assert other in defined, f"{name} imports {other}, which comes after it"
                missing = {a.name for a in node.names} - defined[other]
                assert not missing, f"{name} imports {missing} from {other}, which has none"
        defined[name] = node_script._defined(tree)


def test_the_script_runs_with_the_standard_library_alone(tmp_path):
    (tmp_path / "node_bootstrap.py").write_bytes(script())
    code = textwrap.dedent(
        """
        import inspect, json, sys
        import node_bootstrap as nb
        print(json.dumps({
            "rackform": sorted(m for m in sys.modules if m.startswith("rackform")),
            "configure": list(inspect.signature(nb.configure).parameters),
            "main": callable(nb.main),
            "unit": nb.resume_unit(__import__("pathlib").Path("/opt/x")),
        }))
        """
    )
    # -S: no site-packages (nothing of rackform, no third party); -E: no PYTHONPATH.
    done = subprocess.run(
        [sys.executable, "-S", "-E", "-c", code], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["rackform"] == []
    # What an image bake calls (its `converge` imports the shipped file) and what runs at boot.
    assert got["configure"] == list(inspect.signature(converge.configure).parameters)
    assert got["main"] is True
    assert "ExecStart=" in got["unit"] and "/opt/x/node_bootstrap.py /opt/x" in got["unit"]
    imports = {
        (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
        for n in ast.walk(ast.parse(script()))
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imports - set(sys.stdlib_module_names) == SHIPPED_BESIDE


def test_the_script_is_the_same_bytes_each_time_and_runs_its_main_as_a_file(tmp_path):
    assert script() == script()
    text = script().decode()
    assert text.count("from __future__ import annotations") == 1
    assert text.rstrip().endswith("sys.exit(main(Path(sys.argv[1]).resolve()))")
    assert machine.__name__ == f"{PACKAGE}.machine"  # the module whose main the file runs last


def _package(tmp_path, **modules):
    (tmp_path / "__init__.py").write_text('"""A node package."""\n')
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp_path


def test_two_modules_defining_one_name_cannot_be_one_file(tmp_path):
    src = _package(tmp_path, a="X = 1\ndef f():\n    return X\n", b="X = 2\n")
    with pytest.raises(ScriptError, match=r"b defines what another module does: X \(a\)"):
        script(src, ("a", "b"))


def test_an_import_of_the_package_inside_a_function_cannot_be_left_out(tmp_path):
    src = _package(
        tmp_path,
        a="X = 1\n",
        b=f"def f():\n    from {PACKAGE}.a import X\n    return X\n",
    )
    with pytest.raises(ScriptError, match="inside a block"):
        script(src, ("a", "b"))
    joined = script(_package(tmp_path, b=f"from {PACKAGE}.a import X\nY = X + 1\n"), ("a", "b"))
    namespace: dict = {}
    exec(compile(joined, "node_bootstrap.py", "exec"), namespace)
    assert namespace["Y"] == 2


def test_the_artifact_ships_the_script(tmp_path):
    spec = manifest({"x": 1}, "g", "ubuntu")
    artifact = build_artifact(spec, tmp_path)
    with tarfile.open(artifact.path) as tar:
        assert tar.extractfile("node_bootstrap.py").read() == script()
    assert build_artifact(spec, tmp_path / "again").sha256 == artifact.sha256
