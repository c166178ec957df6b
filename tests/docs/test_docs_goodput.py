"""The goodput guide's tables and outputs are what `rackform goodput` prints: each block
between `<!-- goodput: ARGS -->` and `<!-- /goodput -->` is the command's output for ARGS (with
an empty state directory: the catalog's failure rate), so the guide cannot drift from the code."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from rackform.cli.main import app

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "goodput.md"
BLOCK = re.compile(r"<!-- goodput: (.+?) -->\n(.*?)<!-- /goodput -->", re.S)


def blocks(text: str) -> list[tuple[str, str]]:
    """(ARGS, the block's text without its code fence) for each block of the guide."""
    out = []
    for args, body in BLOCK.findall(text):
        body = re.sub(r"^```text\n|```\n$", "", body.strip("\n") + "\n", flags=re.M)
        out.append((args, body.strip("\n")))
    return out


def test_the_guides_blocks_are_what_the_command_prints(tmp_path, monkeypatch):
    monkeypatch.chdir(GUIDE.parents[2])  # the blueprints' paths as the guide names them
    found = blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(found) == 3, [a for a, _ in found]
    for args, body in found:
        argv = ["goodput", *shlex.split(args), "--state-dir", str(tmp_path / "empty")]
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 0, r.output
        assert r.output.strip("\n") == body, f"docs/guides/goodput.md is stale for: {args}"


def test_the_block_reader_sees_a_stale_block():
    # The test above could not fail if the reader found nothing or kept the fence.
    text = "<!-- goodput: a.yaml -->\n```text\nline 1\nline 2\n```\n<!-- /goodput -->\n"
    assert blocks(text) == [("a.yaml", "line 1\nline 2")]
