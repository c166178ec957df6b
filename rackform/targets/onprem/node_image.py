"""The node image on bare metal and colocation: a disk image built on this machine, for the
site's provisioning (PXE, Ironic, MAAS) to deploy. The bake's artifact is the kind any target's
builder runs (`groups.bake_spec`); the builder is a testbed VM under QEMU
(`testbed.builder`), which has no GPU: for a cluster whose nodes have GPUs the driver's
and DCGM's roles are left to each node's first boot (the plan's `baked_tags`), and
the image's record says so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rackform.boot.artifact import build_artifact
from rackform.boot.groups import bake_spec
from rackform.paths import cache_dir
from rackform.plan.model import Plan
from rackform.targets.runtime import DiskImageRequest, ImageNotBuilt
from rackform.testbed import builder
from rackform.testbed.image import BaseImage, ImageError, ensure_image


def build_disk_image(
    plan: Plan, request: DiskImageRequest, log: Callable[[str], None] = print
) -> builder.DiskImage:
    """Bake the blueprint's node image into `request.out`; ImageNotBuilt (one line) where it
    cannot be."""
    if not plan.baked:
        raise ImageNotBuilt(
            f"{plan.source}: the blueprint bakes no node image (image.bake is not true); "
            "nothing was built"
        )
    formats = request.formats or builder.FORMATS
    unknown = sorted(set(formats) - set(builder.FORMATS))
    if unknown:
        raise ImageNotBuilt(
            f"--format {', '.join(unknown) or '(none)'}: the formats are "
            f"{', '.join(builder.FORMATS)}; nothing was built"
        )
    spec = bake_spec(
        plan, gpu_builder=False, extra_vars=request.extra_vars, pip_args=request.pip_args
    )
    artifact = build_artifact(spec, cache_dir() / "artifacts")
    try:
        base = _base(request.base, log)
        return builder.build(
            artifact.path,
            artifact.sha256,
            request.out,
            base=base,
            formats=formats,
            apt_source=request.apt_source,
            log=log,
            # Those given; the others are the builder's defaults.
            **{
                k: v
                for k, v in (("cpus", request.cpus), ("memory_mb", request.memory_mb))
                if v is not None
            },
        )
    except (builder.BuildError, ImageError) as exc:
        raise ImageNotBuilt(str(exc)) from None


def _base(given: Path | None, log: Callable[[str], None]) -> BaseImage:
    if given is None:
        return ensure_image(log)
    base = BaseImage.in_dir(given.resolve())
    missing = base.missing()
    if missing:
        raise ImageNotBuilt(
            f"--base {given}: no {', '.join(missing)} there (an image directory: the root "
            "filesystem as rootfs.raw, the kernel as vmlinuz, the initrd as initrd.img)"
        )
    return base
