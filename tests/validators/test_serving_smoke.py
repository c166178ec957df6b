"""The serving smoke job on CPU with the real CPU torch: a tiny Llama-layout model written to a
directory standing in for the model mount, loaded, generated from at a concurrency with a KV
cache, and judged; and the ways it must fail: a model file or directory that is a symbolic link,
a mount that does not exist, objectives no node could meet, weights and KV cache over preflight's
estimate, a model that is not the one preflight sized, a deadline passed. The GPU-only branches
(MBU, the allocator's peak) run through the device kind, which is data. The engine path is in
test_serving_endpoint.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from smoke_helpers import ROOT, env

from validators import serving_checks, serving_model, serving_smoke
from validators.report import FAIL, NOT_RUN, PASS, checks_of
from validators.serving_checks import Expect
from validators.serving_job import EXIT_STALLED
from validators.serving_load import Figures, Load, Request, decode_bytes_per_step, figures

TINY = serving_model.STANDINS["tiny"]
SHAPE = ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16"]
LOAD = ["--concurrency", "3", "--prompt-tokens", "12", "--output-tokens", "6", "--requests", "5"]
# Objectives a loaded 2-core machine meets with room: the tiny model decodes in milliseconds.
EASY = ["--ttft-p99-ms", "20000", "--itl-p99-ms", "5000"]


@pytest.fixture(scope="module")
def mount(tmp_path_factory):
    """A model directory as a mount holds one: config.json and model.safetensors."""
    root = tmp_path_factory.mktemp("models")
    path = serving_model.write_standin(str(root), TINY, torch.bfloat16, 1, torch.device("cpu"))
    return path


def run(tmp_path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "serving.json"
    head = ["--device", "cpu", "--report", str(out), "--no-table", "--dtype-bytes", "2"]
    rc = serving_smoke.main([*head, *SHAPE, *LOAD, *extra])
    return rc, json.loads(out.read_text())


def by_name(doc: dict) -> dict:
    return {c.name: c for c in checks_of(doc)}


def test_a_model_on_the_mount_is_loaded_generated_from_and_judged(tmp_path, mount):
    weights = 2 * sum(math.prod(s) for s in serving_model.weight_shapes(TINY).values())  # bf16
    kv = 3 * (12 + 6) * TINY.kv_bytes_per_token(2)
    rc, doc = run(
        tmp_path,
        *EASY,
        "--model-path",
        mount,
        "--expected-peak-bytes",
        str(10**7),
        "--price-usd-hr",
        "4.5",
    )
    c = by_name(doc)
    assert rc == 0 and doc["ok"] and doc["complete"], doc
    assert c["model_load"].status == PASS and c["model_load"].measured == weights
    assert c["model_shape"].status == PASS
    assert c["generation"].status == PASS and c["generation"].measured == 5
    assert c["ttft_p99"].status == c["itl_p99"].status == PASS
    assert c["decode_tokens_per_s"].status == PASS and c["decode_tokens_per_s"].expected == 0.6
    assert c["prefill_tokens_per_s"].status == NOT_RUN
    assert "still to be measured" in c["prefill_tokens_per_s"].detail
    assert c["prefill_tokens_per_s"].measured > 0
    assert c["mbu"].status == NOT_RUN and "no GPU" in c["mbu"].detail
    assert c["peak_memory"].status == PASS and c["peak_memory"].measured == weights + kv
    assert c["cost_per_mtok"].status == NOT_RUN and c["cost_per_mtok"].measured > 0
    s = doc["metrics"]["serving"]
    assert s["requests"] == s["complete"] == 5
    assert 0 < s["ttft_ms_p50"] <= s["ttft_ms_p99"] and 0 < s["itl_ms_p50"] <= s["itl_ms_p99"]
    # The cost is the price over the tokens the run put out in an hour.
    usd = 4.5 / (s["output_tokens_per_s"] * 3600) * 1e6
    assert c["cost_per_mtok"].measured == pytest.approx(usd, rel=1e-3)
    assert set(serving_checks.CHECKS) <= set(c)


def test_with_no_model_named_a_standin_is_written_loaded_and_removed(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rc, doc = run(tmp_path, *EASY, "--scratch", str(scratch))
    c = by_name(doc)
    assert rc == 0 and c["model_load"].status == PASS and c["generation"].status == PASS
    for name in ("model_shape", "ttft_p99", "itl_p99", "decode_tokens_per_s", "peak_memory"):
        assert c[name].status == NOT_RUN and "stand-in" in c[name].detail, name
    assert doc["job"]["standin"]["preset"] == "tiny"
    assert list(scratch.iterdir()) == []  # the stand-in is gone again


def test_objectives_no_node_meets_fail(tmp_path, mount):
    rc, doc = run(
        tmp_path, "--ttft-p99-ms", "0.0001", "--itl-p99-ms", "0.0001", "--model-path", mount
    )
    c = by_name(doc)
    assert rc == 1 and not doc["ok"]
    assert c["ttft_p99"].status == c["itl_p99"].status == FAIL
    assert c["decode_tokens_per_s"].status == FAIL


def test_weights_and_kv_over_the_estimate_fail(tmp_path, mount):
    rc, doc = run(tmp_path, *EASY, "--model-path", mount, "--expected-peak-bytes", "100000")
    c = by_name(doc)["peak_memory"]
    assert rc == 1 and c.status == FAIL and c.measured > 100000 and c.op == "<="


def test_a_model_preflight_did_not_size_fails(tmp_path, mount):
    out = tmp_path / "r.json"
    head = ["--device", "cpu", "--report", str(out), "--no-table", "--dtype-bytes", "2"]
    deeper = ["--layers", "32", *SHAPE[2:]]  # the blueprint's model has 32 layers
    rc = serving_smoke.main([*head, *deeper, *LOAD, *EASY, "--model-path", mount])
    c = by_name(json.loads(out.read_text()))["model_shape"]
    assert rc == 1 and c.status == FAIL and "layers 2 (expected 32)" in c.detail


def test_a_mount_that_does_not_exist_fails_naming_it(tmp_path):
    missing = str(tmp_path / "no-such-mount")
    rc, doc = run(tmp_path, *EASY, "--model-path", missing)
    c = by_name(doc)["model_load"]
    assert rc == 1 and c.status == FAIL and missing in c.detail
    assert doc["complete"] is False


def test_a_model_file_that_is_a_link_is_refused(tmp_path, mount):
    fake = tmp_path / "linked"
    fake.mkdir()
    (fake / "config.json").write_bytes(Path(mount, "config.json").read_bytes())
    os.symlink(f"{mount}/model.safetensors", fake / "model.safetensors")
    rc, doc = run(tmp_path, *EASY, "--model-path", str(fake))
    c = by_name(doc)["model_load"]
    assert rc == 1 and c.status == FAIL and "symbolic link" in c.detail


def test_a_model_directory_that_is_a_link_is_refused(tmp_path, mount):
    link = tmp_path / "model-link"
    os.symlink(mount, link)
    rc, doc = run(tmp_path, *EASY, "--model-path", str(link))
    c = by_name(doc)["model_load"]
    assert rc == 1 and c.status == FAIL and "symbolic link" in c.detail


def test_a_truncated_weights_file_is_refused(tmp_path, mount):
    cut = tmp_path / "cut"
    cut.mkdir()
    for f in ("config.json", "model.safetensors"):
        data = Path(mount, f).read_bytes()
        (cut / f).write_bytes(data if f == "config.json" else data[: len(data) // 2])
    rc, doc = run(tmp_path, *EASY, "--model-path", str(cut))
    c = by_name(doc)["model_load"]
    assert rc == 1 and c.status == FAIL and "model.safetensors" in c.detail


def test_a_passed_deadline_fails_naming_the_phase(tmp_path, mount):
    rc, doc = run(tmp_path, *EASY, "--model-path", mount, "--deadline-s", "0.000001")
    c = by_name(doc)["deadline"]
    assert rc == 1 and c.status == FAIL and "deadline passed during" in c.detail
    assert doc["complete"] is False


def test_a_job_stuck_past_its_deadline_is_stopped_by_the_backstop(tmp_path):
    # A phase that never checks the clock (a read that hangs): the backstop writes the report
    # with a failed `deadline` check and leaves with exit 3.
    out = tmp_path / "stuck.json"
    code = (
        "import time\n"
        "from validators.serving_job import Deadline, Job\n"
        "from validators.report import failed\n"
        f"job = Job({str(out)!r}, {{}})\n"
        "d = Deadline(0.2, grace_s=0.2)\n"
        "d.phase = 'reading the model'\n"
        "d.backstop(lambda p: (job.add(failed('deadline', 'stuck during ' + p)), job.flush()))\n"
        "time.sleep(30)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env(), cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == EXIT_STALLED, done.stderr
    assert "stuck during reading the model" in done.stderr
    c = by_name(json.loads(out.read_text()))["deadline"]
    assert c.status == FAIL and "reading the model" in c.detail


@pytest.mark.parametrize(
    "argv",
    [
        ["--heads", "4", "--kv-heads", "3"],
        ["--gpu-model", "H100;rm -rf"],
        ["--model-path", "relative/path"],
        ["--model-path", "/mnt/../etc"],
        ["--endpoint", "ftp://host"],
        ["--endpoint", "http://user:pw@host:8000"],
        ["--concurrency", "0"],
        ["--output-tokens", "1"],
    ],
)
def test_bad_arguments_are_refused(argv, capsys):
    base = ["--dtype-bytes", "2", *SHAPE, *LOAD, *EASY]
    with pytest.raises(SystemExit) as e:
        serving_smoke.parse(base + argv)
    assert e.value.code == 2


# The GPU-only branches, through the device kind (data): no GPU here.
LOAD_8 = Load(concurrency=8, prompt_tokens=512, output_tokens=128, requests=16)


def fig(itl_p50_ms: float) -> Figures:
    return Figures(16, 16, (100.0, 120.0), (itl_p50_ms, itl_p50_ms * 1.2), 4e4, 8e2, 7e2, 3.0, ())


def expect(**kw) -> Expect:
    base = {"ttft_p99_ms": 500, "itl_p99_ms": 50, "shape": None, "dtype_bytes": 2}
    return Expect(**{**base, **kw})


def test_mbu_on_a_gpu_is_judged_against_the_calibrated_floor_or_reported_as_still_to_measure():
    per_step = decode_bytes_per_step(14_000_000_000, 131072, LOAD_8)
    assert per_step == 14e9 + 8 * 576 * 131072
    # 10 ms a step: 1.46e12 B/s over 3.35 TB/s = 43.6%.
    floor, pct = serving_checks.mbu_check(
        "cuda", fig(10.0), per_step, expect(hbm_tbps=3.35, mbu_min_pct=40.0, gpu_model="H100-SXM")
    )
    assert floor.status == PASS and pct == pytest.approx(43.59, abs=0.01)
    slow, _ = serving_checks.mbu_check(
        "cuda", fig(20.0), per_step, expect(hbm_tbps=3.35, mbu_min_pct=40.0)
    )
    assert slow.status == FAIL
    unmeasured, pct = serving_checks.mbu_check(
        "cuda", fig(10.0), per_step, expect(hbm_tbps=3.35, gpu_model="H200-SXM")
    )
    assert unmeasured.status == NOT_RUN and unmeasured.measured == pct
    assert "still to be measured" in unmeasured.detail and "H200-SXM" in unmeasured.detail
    no_hbm, _ = serving_checks.mbu_check("cuda", fig(10.0), per_step, expect())
    assert no_hbm.status == NOT_RUN and "--hbm-tbps" in no_hbm.detail
    # Tensor parallel: each GPU reads its share.
    assert decode_bytes_per_step(14_000_000_000, 131072, LOAD_8, 2) == per_step / 2


def test_the_gpu_allocator_peak_is_shown_beside_the_weights_and_kv():
    c = serving_checks.memory_check(900, 1200, expect(expected_peak_bytes=1000))
    assert c.status == PASS and "allocator peak 1,200" in c.detail
    assert serving_checks.memory_check(1100, 1200, expect(expected_peak_bytes=1000)).status == FAIL
    assert serving_checks.memory_check(900, None, expect()).status == NOT_RUN


def test_the_figures_come_from_the_records():
    # Two requests sent at 0; tokens at 1.0, 1.1, 1.2 (s): TTFT 1000 ms, ITL 100 ms.
    recs = [Request(0.0, [1.0, 1.1, 1.2], 3), Request(0.0, [1.0, 1.1, 1.2], 3)]
    f = figures(Load(2, 10, 3, 2), recs)
    assert f.ttft_ms == (1000.0, 1000.0) and f.itl_ms[0] == pytest.approx(100.0)
    assert f.prefill_tps == pytest.approx(20.0) and f.decode_tps == pytest.approx(20.0)
    assert f.output_tps == pytest.approx(6 / 1.2) and f.complete == 2
    short = figures(Load(2, 10, 3, 2), [Request(0.0, [1.0], 1), Request(0.0, [], 0, "HTTP 500")])
    assert short.complete == 0 and short.errors == ("HTTP 500",)


def test_a_step_reads_the_same_bytes_by_the_headers_as_by_the_loaded_model(mount):
    # The engine path reads the mount's headers, the in-process path the loaded tensors: the
    # MBU of both rests on the same figure (every weight but the untied embedding table).
    fd = serving_model.open_model(mount)
    try:
        loaded = serving_model.load_dir(fd, mount, torch.device("cpu"), torch.bfloat16)
    finally:
        os.close(fd)
    embed = TINY.vocab * TINY.hidden * 2
    step = loaded.decoder.step_read_bytes
    assert serving_model.weight_bytes_on_disk(mount) == step == loaded.decoder.weight_bytes - embed


def test_decoding_with_the_kv_cache_gives_the_tokens_a_full_recompute_gives(mount):
    # The cache is what makes a decode step read the context instead of recomputing it: the
    # same tokens either way (grouped-query attention included: 4 heads share 2 KV heads).
    fd = serving_model.open_model(mount)
    try:
        dec = serving_model.load_dir(fd, mount, torch.device("cpu"), torch.float32).decoder
    finally:
        os.close(fd)
    # Random weights at 0.02 attend almost evenly; sharper queries and keys make the tokens
    # depend on where each key sits (its rotary position, its slot in the cache).
    for name, w in dec.w.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            w.mul_(40)
    prompts = torch.randint(0, TINY.vocab, (3, 7), generator=torch.Generator().manual_seed(3))
    cache = dec.new_cache(3, 12)
    tok = dec.step(prompts, cache, 0)
    cached = [tok]
    for i in range(4):
        tok = dec.step(tok[:, None], cache, 7 + i)
        cached.append(tok)
    seq, full = prompts, []
    for _step in range(5):
        nxt = dec.step(seq, dec.new_cache(3, seq.shape[1]), 0)
        full.append(nxt)
        seq = torch.cat((seq, nxt[:, None]), dim=1)
    assert torch.equal(torch.stack(cached), torch.stack(full))
    assert len({tuple(t.tolist()) for t in full}) > 1  # the tokens are not all one
