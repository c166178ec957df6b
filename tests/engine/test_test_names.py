"""Every test module's file name is unique across tests/: pytest imports each test module by its
basename (the default `prepend` import mode, with no __init__.py in the test directories), so
two of one name stop the whole suite at collection ("import file mismatch"), which a run of one
directory never shows (stop 66's first fresh run: tests/roles and tests/scheduler each had a
test_slurm_topology_yaml.py)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name():
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if "__pycache__" not in path.parts:
            seen[path.name].append(str(path.relative_to(TESTS)))
    shared = {
        n: p for n, p in seen.items() if len(p) > 1 and n not in ("conftest.py", "__init__.py")
    }
    assert not shared, f"test modules sharing a name (pytest imports them by name): {shared}"
