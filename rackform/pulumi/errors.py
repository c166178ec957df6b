"""Errors the Pulumi program raises for blueprint content it cannot turn into resources."""

from __future__ import annotations


class ProgramError(ValueError):
    """The stack's config or the blueprint cannot make a program (a user mistake, shown as one
    line with the fix)."""
