"""Build what the testbed boots from, all at once: the base image, the baked one where asked,
and the local package repository the tests serve to the VMs (each a cached no-op once built).

Standard library only, like the rest of `rackform.testbed`'s image code, so that
scripts/setup.sh can run it with the system Python while pip fills the virtualenv:

    python3 -m rackform.testbed.prepare [--baked] [--no-packages] [--torch-wheelhouse DIR]

`rackform testbed image` is the same, from the installed command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rackform.testbed.apt import BAKED_PACKAGES, ensure_repo
from rackform.testbed.image import BaseImage, ImageError, ensure_image


def prepare(
    *,
    baked: bool,
    packages: bool,
    log: Callable[[str], None],
    wheelhouse: Path | None = None,
) -> tuple[list[tuple[str, BaseImage]], Path | None]:
    """The images (by what they are: "base image", "baked image", "baked image with torch"
    where a `wheelhouse` is given) and the repository (None unless `packages`). At once: each
    is mostly downloads and dpkg, a core each on a 2-core machine. Raises ImageError."""
    wanted: dict[str, tuple] = {"base image": ((), None)}
    if baked:
        wanted["baked image"] = (BAKED_PACKAGES, None)
    if wheelhouse is not None:
        wanted["baked image with torch"] = (BAKED_PACKAGES, wheelhouse)
    with ThreadPoolExecutor(max_workers=len(wanted) + 1) as pool:
        repo = pool.submit(ensure_repo, log) if packages else None
        futures = {
            what: pool.submit(ensure_image, p, log, wheels) for what, (p, wheels) in wanted.items()
        }
        images = [(what, f.result()) for what, f in futures.items()]
        return images, (repo.result() if repo is not None else None)


def report(images: list[tuple[str, BaseImage]], repo: Path | None) -> list[str]:
    lines = []
    for what, img in images:
        how = f"built in {img.built_s:.0f} s" if img.built_s is not None else "cached"
        lines.append(f"{what}: {img.rootfs.parent} ({how})")
    if repo is not None:
        lines.append(f"packages: {repo}")
    return lines


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m rackform.testbed.prepare")
    parser.add_argument("--baked", action="store_true", help="also the baked image")
    parser.add_argument("--no-packages", dest="packages", action="store_false")
    parser.add_argument("--torch-wheelhouse", type=Path, help="also the baked image with torch")
    a = parser.parse_args(argv)
    try:
        images, repo = prepare(
            baked=a.baked, packages=a.packages, log=_log, wheelhouse=a.torch_wheelhouse
        )
    except ImageError as exc:
        _log(f"rackform testbed image: {exc}")
        return 1
    print("\n".join(report(images, repo)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
