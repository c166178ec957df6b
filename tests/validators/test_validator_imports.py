"""validators/ is shipped to nodes as files and run there: it may import only the standard
library, torch and itself (and, optionally, pynvml for the host checks and boto3 for the object
tier). Never rackform, pydantic or yaml."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from gpu_collection import VALIDATORS_DIR

VALIDATORS = VALIDATORS_DIR
ALLOWED = set(sys.stdlib_module_names) | {"torch", "validators", "pynvml", "boto3"}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


@pytest.mark.parametrize("path", sorted(VALIDATORS.glob("*.py")), ids=lambda p: p.name)
def test_only_stdlib_and_torch(path):
    bad = [f"{path.name}:{line}: {mod}" for line, mod in _imports(path) if mod not in ALLOWED]
    assert not bad, "validators import more than torch and the standard library: " + ", ".join(bad)


@pytest.mark.parametrize(("module", "where"), [("pynvml", "hostcheck.py"), ("boto3", "tier.py")])
def test_the_optional_ones_are_optional(module, where):
    # Imported only inside try/except ImportError, and nowhere else: a node without them runs
    # every validator that does not need them.
    for path in VALIDATORS.glob("*.py"):
        tree = ast.parse(path.read_text())
        guarded = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Try)
            and any(isinstance(s, ast.Import) and s.names[0].name == module for s in n.body)
            and any(getattr(h.type, "id", "") == "ImportError" for h in n.handlers)
        ]
        plain = [line for line, mod in _imports(path) if mod == module]
        if path.name == where:
            assert guarded and len(plain) == len(guarded), (
                f"{module} must be imported in try/except ImportError"
            )
        else:
            assert not plain, f"{path.name} imports {module}"
