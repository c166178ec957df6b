"""The node image on bare metal and colocation: a disk image baked on a testbed VM. What needs no
VM is here (the bake's artifact and what a GPU-less builder bakes, the command's refusals, the
output replaced only by a finished build); the build itself, the nodes booting from it and the
node that configures itself from it are the e2e's (tests/e2e/conftest.py `node_image`,
tests/e2e/test_bootstrap_vm.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from planhelp import BARE_METAL, COLOCATION

from rackform.blueprint.loader import load_effective
from rackform.boot.groups import bake_spec
from rackform.engine import compile_effective
from rackform.plan.bake import BAKED_TAGS, NEEDS_GPU
from rackform.targets.onprem.node_image import build_disk_image
from rackform.targets.runtime import DiskImageRequest, ImageNotBuilt
from rackform.testbed import builder
from rackform.testbed.image import BaseImage

ROOT = Path(__file__).resolve().parents[2]
BAKED = {**BARE_METAL, "image": {"bake": True}}


def _plan_of(tmp_path, doc):
    from planhelp import write_blueprint

    return compile_effective(load_effective(write_blueprint(tmp_path, doc), None))


def _rackform(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "rackform", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def test_a_gpu_less_builder_leaves_the_gpu_roles_to_each_node(tmp_path):
    # The cluster's nodes have GPUs and the builder (a QEMU VM) has none: the driver and DCGM
    # are not baked, and the record says so, so a node's boot runs them (image_check skips only
    # the tags the image's record lists).
    spec = bake_spec(_plan_of(tmp_path, BAKED), gpu_builder=False)
    assert spec["image"]["tags"] == [t for t in BAKED_TAGS if t not in NEEDS_GPU]
    assert "nvidia_driver" not in spec["image"]["tags"] and "nccl_rdma" in spec["image"]["tags"]
    # AWS's builder has a GPU: every baked tag.
    assert bake_spec(_plan_of(tmp_path, BAKED))["image"]["tags"] == list(BAKED_TAGS)
    # A cluster without GPUs (the testbed's): those roles install nothing anywhere, so every tag.
    group = {k: v for k, v in BAKED["node_groups"][0].items() if k not in ("gpu", "gpus_per_node")}
    gpu_less = {**BAKED, "node_groups": [group]}
    spec = bake_spec(_plan_of(tmp_path, gpu_less), gpu_builder=False)
    assert spec["image"]["tags"] == list(BAKED_TAGS)


def test_a_builds_variables_and_pip_arguments_go_into_its_artifact(tmp_path):
    spec = bake_spec(
        _plan_of(tmp_path, BAKED),
        gpu_builder=False,
        extra_vars={"smoke_train_pip_no_index": True},
        pip_args=("--no-index",),
    )
    assert spec["vars"]["smoke_train_pip_no_index"] is True
    assert spec["vars"]["nccl_rdma_require_devices"] is False  # the builder has no fabric
    assert spec["vars"]["smoke_train_run"] is False  # the bake installs, it runs no job
    assert spec["pip"]["args"] == ["--no-index"]


def test_colocation_bakes_a_disk_image_too(tmp_path):
    plan = _plan_of(tmp_path, {**COLOCATION, "image": {"bake": True}})
    assert plan.baked
    with pytest.raises(ImageNotBuilt, match="--format vhd: the formats are qcow2, raw"):
        build_disk_image(plan, DiskImageRequest(out=tmp_path / "out", formats=("vhd",)))


def test_the_command_refuses_in_one_line(tmp_path):
    bp = tmp_path / "metal-baked.yaml"
    from planhelp import write_blueprint

    bp = write_blueprint(tmp_path, BAKED)
    r = _rackform(
        "image", "build", bp, "--base", tmp_path / "no-such-image", "--out", tmp_path / "o"
    )
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "no-such-image: no rootfs.raw, vmlinuz, initrd.img there" in line
    assert not (tmp_path / "o").exists()
    r = _rackform("image", "build", bp, "--format", "vmdk", "--out", tmp_path / "o")
    assert r.returncode == 2 and "--format vmdk" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _rackform("image", "build", bp, "-x", "not a pair")
    assert r.returncode == 2 and "is not KEY=VALUE" in r.stderr, r.stderr


def _base(tmp_path, name: str = "base", content: bytes = b"x") -> BaseImage:
    d = tmp_path / name
    d.mkdir()
    for file in ("rootfs.raw", "vmlinuz", "initrd.img"):
        (d / file).write_bytes(content)
    return BaseImage.in_dir(d)


def test_the_builder_vm_is_sized_as_asked(tmp_path, monkeypatch):
    # The VM itself is the e2e's (it bakes with two vCPUs); here, what reaches the builder.
    from planhelp import write_blueprint

    seen = {}

    def bake(artifact, sha256, work, base, apt_source, memory_mb, cpus, log):
        seen.update(memory_mb=memory_mb, cpus=cpus)
        raise builder.BuildError("stop here")

    monkeypatch.setattr(builder, "_bake", bake)
    base = _base(tmp_path)
    bp = write_blueprint(tmp_path, BAKED)
    plan = compile_effective(load_effective(bp, None))
    request = DiskImageRequest(out=tmp_path / "o", base=base.rootfs.parent, cpus=2, memory_mb=3072)
    with pytest.raises(ImageNotBuilt, match="stop here"):
        build_disk_image(plan, request, log=lambda line: None)
    assert seen == {"memory_mb": 3072, "cpus": 2}
    r = _rackform("image", "build", bp, "--cpus", "0")
    assert r.returncode == 2 and "--cpus" in r.stderr, r.stderr
    # From the command line: what is given reaches the builder, the rest is the default.
    from typer.testing import CliRunner

    from rackform.cli.main import app

    for args, want in (
        ((), {"memory_mb": 2048, "cpus": 1}),
        (("--cpus", "2"), {"memory_mb": 2048, "cpus": 2}),
    ):
        seen.clear()
        got = CliRunner().invoke(
            app,
            [
                "image",
                "build",
                str(bp),
                "--base",
                str(base.rootfs.parent),
                "--out",
                str(tmp_path / "o"),
                *args,
            ],
        )
        assert got.exit_code == 2 and seen == want, (got.output, seen)


def test_a_failed_build_leaves_the_previous_image(tmp_path, monkeypatch):
    # The VM's part of a build is the e2e's; here it fails at once (as a converge that exits
    # non-zero does), to show what `build` does with the output around it.
    out = tmp_path / "image"
    out.mkdir()
    (out / "rootfs.raw").write_bytes(b"the previous image")
    (out / "image.json").write_text(json.dumps({"artifact": "old", "files": {}}))

    def fails(*args, **kw):
        raise builder.BuildError("the converge on the builder exited 2:\nTASK failed")

    monkeypatch.setattr(builder, "_bake", fails)
    artifact = tmp_path / "a.tar.gz"
    artifact.write_bytes(b"artifact")
    with pytest.raises(builder.BuildError) as err:
        builder.build(artifact, "new", out, base=_base(tmp_path), log=lambda line: None)
    assert "the converge on the builder exited 2" in str(err.value)
    assert f"{out.resolve()} is left as it was" in str(err.value)
    assert (out / "rootfs.raw").read_bytes() == b"the previous image"
    # Nothing of the failed build is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar.gz", "base", "image"]


def test_the_same_artifact_on_the_same_base_is_not_built_again(tmp_path, monkeypatch):
    base = _base(tmp_path)
    out = tmp_path / "image"
    out.mkdir()
    manifest = {
        "artifact": "abc",
        "base": builder._base_id(base),
        "files": {"rootfs.qcow2": "1", "rootfs.raw": "2"},
        "record": {"roles": "r", "tags": ["nccl_rdma"]},
    }
    (out / "image.json").write_text(json.dumps(manifest))

    def building(*args, **kw):
        raise builder.BuildError("building")

    monkeypatch.setattr(builder, "_bake", building)
    got = builder.build(tmp_path / "a.tar.gz", "abc", out, base=base, log=lambda line: None)
    assert got.built_s is None and got.record["tags"] == ["nccl_rdma"]
    # Another artifact, another base, or a format the output lacks: built.
    for kw in ({"sha256": "abd"}, {"formats": ("qcow2",), "base": _base(tmp_path, "base2", b"yy")}):
        with pytest.raises(builder.BuildError, match="building"):
            builder.build(
                tmp_path / "a.tar.gz",
                kw.get("sha256", "abc"),
                out,
                base=kw.get("base", base),
                formats=kw.get("formats", builder.FORMATS),
                log=lambda line: None,
            )
    assert json.loads((out / "image.json").read_text()) == manifest
