"""The site builds strictly, and the generated reference pages are the code's."""

from __future__ import annotations

import re
from pathlib import Path

from rackform import docs_gen

ROOT = Path(__file__).resolve().parents[2]


def test_site_builds_strictly(built_site):
    for page in ("index.html", "getting-started/index.html", "reference/blueprint/index.html"):
        assert (built_site / page).is_file(), page


def test_built_site_needs_nothing_from_the_internet(built_site):
    """No script, stylesheet or font from another host: the site is read behind firewalls
    (Material's Google Fonts are off, mermaid is vendored rather than loaded from unpkg)."""
    external = set()
    for html in built_site.rglob("*.html"):
        for m in re.finditer(
            r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', html.read_text()
        ):
            external.add((html.relative_to(built_site).as_posix(), m.group(1)))
    assert external == set()


def test_reference_pages_match_the_code():
    committed = ROOT / "docs" / "reference"
    stale = [
        name
        for name, text in docs_gen.render().items()
        if not (committed / name).is_file() or (committed / name).read_text() != text
    ]
    assert stale == [], (
        f"docs/reference/{', '.join(stale)} differ from the code (a new command, option, field, "
        "finding code, check, role variable or catalog figure): regenerate them with "
        "`python -m rackform.docs_gen` and commit the result"
    )


def test_every_reference_page_is_generated_and_listed():
    on_disk = {p.name for p in (ROOT / "docs" / "reference").glob("*.md")}
    assert on_disk == set(docs_gen.PAGES)
    nav = (ROOT / "mkdocs.yml").read_text()
    assert all(f"reference/{name}" in nav for name in docs_gen.PAGES)
