"""The node's bootstrap script as the artifact ships it, `node_bootstrap.py`: the modules of the
`rackform.boot.node` package joined into one standalone file (a node has nothing of rackform
installed to import them from, and its user data, its resume unit and an image bake each run or
import that one file).

The modules go in the order each needs the ones before it. What each imports from the others is
left out (those names are the file's own then), its `from __future__` import becomes the file's
one, and its docstring a comment heading it; the package's docstring is the file's. The same
sources give the same bytes, so an unchanged node script keeps the artifact's sha256.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "rackform.boot.node"
SOURCES = Path(__file__).with_name("node")
# Each module after the ones it imports.
MODULES = (
    "log",
    "virtualenv",
    "redirects",
    "report",
    "aws",
    "converge",
    "serving_job",
    "machine",
)


class ScriptError(ValueError):
    """The modules cannot be one file as they are (a name two of them define, an import of the
    package that is not at a module's top level)."""


def _docstring(tree: ast.Module) -> ast.Expr | None:
    first = tree.body[0] if tree.body else None
    is_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    return first if is_doc and isinstance(first.value.value, str) else None


def _own(node: ast.stmt) -> bool:
    """An import the joined file has no use for: __future__'s, or of the package itself."""
    return isinstance(node, ast.ImportFrom) and (
        node.module == "__future__" or (node.module or "").startswith(PACKAGE)
    )


def _defined(tree: ast.Module) -> set[str]:
    """The names a module defines at its top level (its imports aside)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _body(name: str, text: str) -> tuple[list[str], set[str]]:
    tree = ast.parse(text, f"{PACKAGE}.{name}")
    nested = [
        n
        for n in ast.walk(tree)
        if _own(n) and n not in tree.body and n.module != "__future__"  # type: ignore[union-attr]
    ]
    if nested:
        raise ScriptError(f"{PACKAGE}.{name}: an import of {PACKAGE} inside a block")
    lines = text.splitlines()
    dropped: set[int] = set()
    doc = _docstring(tree)
    heading = [f"# --- {PACKAGE}.{name}"]
    if doc is not None:
        heading += [f"# {line}".rstrip() for line in doc.value.value.splitlines()]
        dropped |= set(range(doc.lineno, doc.end_lineno + 1))
    for node in tree.body:
        if _own(node):
            dropped |= set(range(node.lineno, node.end_lineno + 1))
    kept = [line for i, line in enumerate(lines, 1) if i not in dropped]
    while kept and not kept[0].strip():
        kept.pop(0)
    return [*heading, "", *kept], _defined(tree)


def script(sources: Path = SOURCES, modules: tuple[str, ...] = MODULES) -> bytes:
    """`node_bootstrap.py`'s bytes, from the package's modules under `sources`."""
    package_doc = ast.get_docstring(ast.parse((sources / "__init__.py").read_text("utf-8")))
    out = ['"""' + (package_doc or "") + '\n"""', "", "from __future__ import annotations"]
    seen: dict[str, str] = {}
    for name in modules:
        body, defined = _body(name, (sources / f"{name}.py").read_text(encoding="utf-8"))
        twice = sorted(n for n in defined if n in seen)
        if twice:
            where = ", ".join(f"{n} ({seen[n]})" for n in twice)
            raise ScriptError(f"{PACKAGE}.{name} defines what another module does: {where}")
        seen.update(dict.fromkeys(defined, name))
        out += ["", "", *body]
    return ("\n".join(out).rstrip() + "\n").encode("utf-8")
