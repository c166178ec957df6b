"""Printing problems and leaving with the right exit status."""

from __future__ import annotations

import sys
from collections.abc import Iterable

import typer

from rackform.blueprint.problems import Problem

EXIT_INVALID = 2


def fail(problems: Iterable[Problem]) -> typer.Exit:
    """Print one line per problem on stderr; return the Exit to raise (status 2)."""
    for p in problems:
        print(p, file=sys.stderr)
    return typer.Exit(EXIT_INVALID)
