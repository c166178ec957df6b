"""Real git repositories for the GitOps tests: a bare "remote" and clones of it, with real
commits and branches (no mocked git)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "Pat Platform",
    "GIT_AUTHOR_EMAIL": "pat@example.com",
    "GIT_COMMITTER_NAME": "Pat Platform",
    "GIT_COMMITTER_EMAIL": "pat@example.com",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **IDENTITY}
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


# A team's blueprint repository is a Pulumi project (what `rackform init` makes): `up` runs there.
PROJECT = "name: team\nruntime: python\nmain: __main__.py\n"


def make_remote(tmp: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """A bare remote whose main branch holds `files` (and a Pulumi.yaml unless they have one),
    and a clone of it (user configured)."""
    files = {"Pulumi.yaml": PROJECT, **files}
    remote = tmp / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    seed = tmp / "seed"
    subprocess.run(["git", "init", "-q", "-b", "main", str(seed)], check=True)
    write(seed, files)
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "initial blueprints")
    git(seed, "remote", "add", "origin", str(remote))
    git(seed, "push", "-q", "origin", "main")
    return remote, clone(remote, tmp / "work")


def clone(remote: Path, where: Path, *args: str) -> Path:
    subprocess.run(["git", "clone", "-q", *args, str(remote), str(where)], check=True)
    git(where, "config", "user.name", IDENTITY["GIT_AUTHOR_NAME"])
    git(where, "config", "user.email", IDENTITY["GIT_AUTHOR_EMAIL"])
    return where


def write(repo: Path, files: dict[str, str | None]) -> None:
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def commit(repo: Path, message: str, files: dict[str, str | None] | None = None) -> str:
    if files:
        write(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")
