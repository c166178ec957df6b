"""The git side of `rackform diff` and `rackform promote --commit`: revisions resolved, the
blueprint files that changed between two of them, and a file's text at a revision. Plain `git`
subprocesses: the repository a pipeline checked out is the only state."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

BLUEPRINT_SUFFIXES = (".yaml", ".yml")


class GitError(Exception):
    """A revision or repository problem the user fixes (one line, with the fix)."""


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc


def toplevel(path: Path) -> Path:
    proc = git(path, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise GitError(f"{path} is not inside a git repository")
    return Path(proc.stdout.strip())


def resolve(repo: Path, ref: str, flag: str) -> str:
    """The commit `ref` names. A ref a shallow clone lacks says how to fetch it."""
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if proc.returncode == 0:
        return proc.stdout.strip()
    shallow = git(repo, "rev-parse", "--is-shallow-repository", check=False).stdout.strip()
    if shallow == "true":
        raise GitError(
            f"{flag} {ref}: not in this shallow clone; run `git fetch --unshallow` (or check out "
            "with fetch-depth: 0) so the base revision is there"
        )
    raise GitError(f"{flag} {ref}: no such revision in {repo}")


@dataclass(frozen=True)
class Change:
    """One blueprint file between two revisions: A(dded), D(eleted), M(odified), R(enamed)."""

    status: str
    old: str | None  # path at the base (None when added)
    new: str | None  # path at the head (None when deleted)

    @property
    def path(self) -> str:
        return self.new or self.old or ""


def _is_blueprint(path: str) -> bool:
    name = Path(path).name
    return name.endswith(BLUEPRINT_SUFFIXES) and not name.startswith("Pulumi.")


def changes(repo: Path, base: str, head: str, paths: list[str]) -> list[Change]:
    """The blueprint files under `paths` that differ between the commits, renames paired."""
    out = git(repo, "diff", "--name-status", "-M", "-z", base, head, "--", *paths).stdout
    fields = out.split("\0")
    result: list[Change] = []
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i][0]
        if status in "RC":
            old, new = fields[i + 1], fields[i + 2]
            i += 3
        else:
            old = new = fields[i + 1]
            i += 2
        if status == "C":
            status, old = "A", None
        if status == "A":
            old = None
        if status == "D":
            new = None
        if status == "T":
            status = "M"
        if any(_is_blueprint(p) for p in (old, new) if p):
            result.append(Change(status, old, new))
    return sorted(result, key=lambda c: c.path)


def show(repo: Path, commit: str, path: str) -> bytes:
    proc = subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, check=False
    )
    if proc.returncode != 0:
        raise GitError(f"{path} is not in {commit[:12]}")
    return proc.stdout


def commit_files(repo: Path, files: list[Path], message: str) -> str:
    """Stage exactly `files` and commit them; the new commit. Nothing else in the index goes."""
    git(repo, "add", "--", *map(str, files))
    git(repo, "commit", "-q", "-m", message, "--", *map(str, files))
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def head_commit(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def user(repo: Path) -> str:
    """Who is promoting: git's configured identity, as a commit would name it."""
    name = git(repo, "config", "user.name", check=False).stdout.strip()
    email = git(repo, "config", "user.email", check=False).stdout.strip()
    return f"{name} <{email}>" if email else name or "unknown"
