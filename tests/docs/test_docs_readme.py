"""The README stays a front page: short, its blueprint valid, its links into the site live."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from rackform.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 200


def test_readme_links_resolve():
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links, "the README links into the site"
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert missing == []


def test_readme_blueprint_validates_with_no_finding(tmp_path):
    block = re.search(r"```yaml\n(.*?)```", README.read_text(), re.S).group(1)
    bp = tmp_path / "first.yaml"
    bp.write_text(block)
    r = CliRunner().invoke(app, ["validate", str(bp)])
    assert r.exit_code == 0, r.output
    assert "valid" in r.output and "warning" not in r.output
