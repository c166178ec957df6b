"""The checkpoint round trip with the real torch.distributed.checkpoint on a one-rank gloo
group: bit-for-bit comparison that cannot pass by accident, the writer's layout and figures
as claimed, and failures that say why."""

from __future__ import annotations

import os
import resource

import pytest
import torch
from smoke_helpers import one_rank_group

from validators import checkpoint, storage


@pytest.fixture(scope="module")
def world1():
    with one_rank_group() as group:
        yield group


def _trained(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        model(torch.randn(4, 64)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def test_roundtrip_identical_and_cleaned_up(world1, tmp_path):
    model, opt = _trained()
    path = tmp_path / "ck"
    res = checkpoint.roundtrip(model, opt, str(path), world1, leader=True)
    assert res.error is None
    assert res.mismatches == []
    assert res.compared >= 4 + 2 * 4  # 4 parameters, and exp_avg/exp_avg_sq for each
    assert res.bytes > 3 * 64 * 64 * 4  # weights and both Adam moments of the 64x64 layer
    assert res.write_gbps > 0 and res.read_gbps > 0
    assert not path.exists()


def test_keep_leaves_a_loadable_checkpoint(world1, tmp_path):
    model, opt = _trained()
    path = tmp_path / "ck"
    assert checkpoint.roundtrip(model, opt, str(path), world1, True, keep=True).error is None
    assert (path / ".metadata").is_file()
    assert any(p.suffix == ".distcp" for p in path.iterdir())


def test_flipped_copy_differs_in_every_byte():
    t = torch.arange(10, dtype=torch.float32)
    f = checkpoint._flipped({"a": t, "b": [torch.tensor(3)], "lr": 0.1})
    assert torch.all(f["a"].view(torch.uint8) == ~t.view(torch.uint8))
    assert not checkpoint._same(t, f["a"])
    assert checkpoint._same(float("nan"), float("nan"))  # a NaN lr round-trips as NaN
    assert f["lr"] == 0.1
    strided = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # not contiguous
    assert not checkpoint._same(strided, checkpoint._flipped(strided))


def test_one_flipped_byte_on_disk_is_caught(world1, tmp_path):
    # torch.load never checks torch.save's CRC-32 (and the save skips it): the comparison
    # alone must catch a bad byte, and name the entry it is in.
    model, _ = _trained()
    state = {"model": model.state_dict()}
    path = str(tmp_path / "ck")
    os.makedirs(path)
    res = checkpoint.Result(path)
    assert checkpoint._save(state, path, world1, 1, res, lambda: None) is None
    data = next(p for p in (tmp_path / "ck").iterdir() if p.suffix == ".distcp")
    raw = bytearray(data.read_bytes())
    weight = state["model"]["0.weight"].numpy().tobytes()
    at = raw.find(weight)
    assert at >= 0, "the weight's bytes are not in the file as they are in memory"
    raw[at + len(weight) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    err = checkpoint._load_and_compare(state, path, world1, True, res, lambda: None)
    assert err is None
    assert res.mismatches == ["model.0.weight"]


def test_the_layout_and_figures_are_the_writers(world1, tmp_path):
    """Two writer threads: two data files for the one rank and the .metadata, written past the
    page cache where the filesystem allows; the GB/s is those files' bytes over the save's
    time."""
    model, opt = _trained()
    path = tmp_path / "ck"
    res = checkpoint.roundtrip(model, opt, str(path), world1, True, threads=2, keep=True)
    assert res.error is None and res.mismatches == []
    files = sorted(p.name for p in path.iterdir())
    assert files == [".metadata", "__0_0.distcp", "__0_1.distcp"]
    assert all((path / f).stat().st_size > 0 for f in files)
    assert res.bytes == sum((path / f).stat().st_size for f in files)
    assert res.write_gbps == pytest.approx(res.bytes / res.write_s / 1e9)
    assert res.read_gbps == pytest.approx(res.bytes / res.read_s / 1e9)
    direct = "O_DIRECT" in res.writer and "page cache" not in res.writer
    assert direct is _takes_o_direct(tmp_path), res.writer
    assert res.writer.startswith("2 files per rank, ") and res.writer.endswith("fsync'd")


def _takes_o_direct(directory) -> bool:
    f = storage.DirectFile(str(directory / "probe"), storage.Blocks(storage.ALIGN), depth=1)
    f.write(b"x" * storage.ALIGN)
    f.close()
    (directory / "probe").unlink()
    return f.direct


def test_the_writer_is_dcps_with_direct_files(tmp_path):
    blocks = storage.Blocks(storage.ALIGN)
    w = checkpoint.writer(str(tmp_path), 3, blocks, depth=2)
    assert (w.thread_count, w.single_file_per_rank, w.sync_files) == (3, True, True)
    assert isinstance(w.fs, checkpoint._Files) and w.fs.depth == 2 and w.fs.blocks is blocks


@pytest.mark.parametrize("fail", [False, True])
def test_torch_saves_crc32_comes_back_after_the_save(world1, tmp_path, fail):
    model, opt = _trained()
    assert torch.serialization.get_crc32_options() is True
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    if fail:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, old[1]))
    try:
        res = checkpoint.roundtrip(model, opt, str(tmp_path / "ck"), world1, True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
    assert (res.error is not None) is fail
    assert torch.serialization.get_crc32_options() is True


def test_existing_directory_is_never_overwritten(world1, tmp_path):
    model, opt = _trained()
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "precious").write_text("data")
    res = checkpoint.roundtrip(model, opt, str(tmp_path / "ck"), world1, True)
    assert res.error.startswith(f"cannot create {tmp_path / 'ck'}: File exists")
    assert (tmp_path / "ck" / "precious").read_text() == "data"


def test_missing_parent_fails_clearly(world1, tmp_path):
    model, opt = _trained()
    res = checkpoint.roundtrip(model, opt, str(tmp_path / "nope" / "ck"), world1, True)
    assert "No such file or directory" in res.error


def test_write_failure_names_the_cause(world1, tmp_path):
    # RLIMIT_FSIZE makes the kernel refuse the write (EFBIG), as a full disk would (ENOSPC).
    model, opt = _trained()
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, old[1]))
    try:
        res = checkpoint.roundtrip(model, opt, str(tmp_path / "ck"), world1, True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
    assert res.error.startswith("write failed: ")
    assert "RLIMIT_FSIZE" in res.error
    assert not (tmp_path / "ck").exists()
