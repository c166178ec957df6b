"""Build what the testbed boots from, both at once: the base image and the local package
repository the tests serve to the VMs (each a cached no-op once built).

Standard library only, like the rest of `rackform.testbed`'s image code, so that
the checkout's setup script can run it with the system Python while pip fills the virtualenv:

    python3 -m rackform.testbed.prepare [--no-packages]

`rackform testbed image` is the same, from the installed command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rackform.testbed.apt import ensure_repo
from rackform.testbed.image import BaseImage, ImageError, ensure_image


def prepare(*, packages: bool, log: Callable[[str], None]) -> tuple[BaseImage, Path | None]:
    """The base image and the repository (None unless `packages`). At once: each is mostly
    downloads and dpkg, a core each on a 2-core machine. Raises ImageError."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        repo = pool.submit(ensure_repo, log) if packages else None
        base = pool.submit(ensure_image, log)
        return base.result(), (repo.result() if repo is not None else None)


def report(base: BaseImage, repo: Path | None) -> list[str]:
    how = f"built in {base.built_s:.0f} s" if base.built_s is not None else "cached"
    lines = [f"base image: {base.rootfs.parent} ({how})"]
    if repo is not None:
        lines.append(f"packages: {repo}")
    return lines


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m rackform.testbed.prepare")
    parser.add_argument("--no-packages", dest="packages", action="store_false")
    a = parser.parse_args(argv)
    try:
        base, repo = prepare(packages=a.packages, log=_log)
    except ImageError as exc:
        _log(f"rackform testbed image: {exc}")
        return 1
    print("\n".join(report(base, repo)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
