"""Errors the Pulumi program raises for blueprint content it cannot turn into resources."""

from __future__ import annotations


class ProgramError(ValueError):
    """The stack's config or the blueprint cannot make a program: a user mistake. `path` is the
    blueprint field at fault (when there is one), so the CLI can locate it in the file."""

    def __init__(self, message: str, path: tuple[str | int, ...] = (), fix: str = ""):
        super().__init__(message)
        self.message = message
        self.path = path
        self.fix = fix
