"""One node-lifecycle core: across rackform/, one exception a run that finds a lock taken is
told (`Held`), one module that takes a lock with flock for the lifecycle (the controller's lease
raises the same Held), and one function that finds the state directory (the only code that reads
$RACKFORM_ROLLOUT_DIR, $RACKFORM_REAP_DIR or names an earlier release's directories). Each rule
is read from the source, and each is shown to fail on a tree that breaks it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rackform"

# Locks that are not a cluster's: the build of the Ansible collection and the local testbed's
# VMs and images, which wait for or refuse one another on this machine only.
NOT_THE_LIFECYCLES = {"rackform/collection.py", "rackform/testbed/image.py",
                      "rackform/testbed/lifecycle.py"}  # fmt: skip
LOCK_MODULE = "rackform/lifecycle/lock.py"
STATE_MODULE = "rackform/lifecycle/directory.py"
VARIABLES = {"RACKFORM_ROLLOUT_DIR", "RACKFORM_REAP_DIR"}
EARLIER = (".rackform/reap", ".rackform/rollout", ".rackform/lifecycle")


def sources() -> dict[str, str]:
    root = PACKAGE.parent
    return {str(p.relative_to(root)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of every docstring's node: words, not code."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def held_classes(src: dict[str, str]) -> list[str]:
    """Every exception class named Held: `module:line`."""
    out = []
    for path, text in src.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name == "Held" and node.bases:
                out.append(f"{path}:{node.lineno}")
    return out


def flock_users(src: dict[str, str]) -> set[str]:
    """The modules that call fcntl.flock (or a name imported from fcntl as flock)."""
    out = set()
    for path, text in src.items():
        for node in ast.walk(ast.parse(text)):
            called = isinstance(node, ast.Attribute) and node.attr == "flock"
            imported = isinstance(node, ast.ImportFrom) and node.module == "fcntl"
            if called or (imported and any(a.name == "flock" for a in node.names)):
                out.add(path)
    return out


def state_resolvers(src: dict[str, str]) -> dict[str, list[str]]:
    """Module -> what in its code finds a state directory: a function named state_dir, a string
    that is one of the variables, or one that names a directory of the lifecycle under
    ~/.rackform (docstrings, which only describe, aside; a command's help names the default
    through the state directory's own words)."""
    out: dict[str, list[str]] = {}
    for path, text in src.items():
        tree = ast.parse(text)
        docs = _docstrings(tree)
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "state_dir":
                found.append(f"def state_dir (line {node.lineno})")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and (node.value in VARIABLES or any(e in node.value for e in EARLIER))
            ):
                found.append(f"{node.value[:40]!r} (line {node.lineno})")
        if found:
            out[path] = found
    return out


def test_one_held_for_every_lock():
    assert held_classes(sources()) == [f"{LOCK_MODULE}:{_line()}"]


def _line() -> str:
    tree = ast.parse((PACKAGE / "lifecycle" / "lock.py").read_text())
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Held"]
    return str(node.lineno)


def test_one_lock_implementation():
    assert flock_users(sources()) - NOT_THE_LIFECYCLES == {LOCK_MODULE}
    # The controller's lease is the same lock's other place: it raises the one Held.
    lease = ast.parse((PACKAGE / "lifecycle" / "lease.py").read_text())
    assert not [n for n in ast.walk(lease) if isinstance(n, ast.ClassDef)]
    from rackform.lifecycle import lease as lease_module
    from rackform.lifecycle.lock import Held

    assert lease_module.Held is Held


def test_one_function_finds_the_state_directory():
    found = state_resolvers(sources())
    assert set(found) == {STATE_MODULE}, found
    assert [f for f in found[STATE_MODULE] if f.startswith("def state_dir")] != []


def test_the_rules_fail_on_a_tree_that_breaks_them():
    # The three tests above could not fail if the readers missed what they look for: a second
    # Held, a second flock and a second resolver, each as the three triggers once had them.
    tree = sources()
    tree["rackform/reap/audit.py"] = (
        "import fcntl, os\nfrom pathlib import Path\n"
        "class Held(Exception):\n    pass\n"
        "def state_dir(given=None):\n"
        "    return given or Path(os.environ.get('RACKFORM_REAP_DIR') or '~/.rackform/reap')\n"
        "def lock(fd):\n    fcntl.flock(fd, fcntl.LOCK_EX)\n"
    )
    tree["rackform/rollout/record.py"] = (
        'DEFAULT_DIR = "~/.rackform/rollout"\n'
        "class Held(RecordError):\n    '''~/.rackform/rollout: words only'''\n"
    )
    assert len(held_classes(tree)) == 3
    assert "rackform/reap/audit.py" in flock_users(tree)
    found = state_resolvers(tree)
    assert set(found) == {STATE_MODULE, "rackform/reap/audit.py", "rackform/rollout/record.py"}
    assert len(found["rackform/reap/audit.py"]) == 3  # the function, the variable, the default
    assert found["rackform/rollout/record.py"] == ["'~/.rackform/rollout' (line 1)"]
