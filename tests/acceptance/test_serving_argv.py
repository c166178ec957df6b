"""The serving smoke job's command line as rackform builds it (rackform/acceptance/argv.py):
the GPU's catalog figures reach the job as arguments (the validators never read the catalog),
a floor never measured on a GPU stays out (the job reports MBU as still to be measured), and
the line parses with the job's own parser."""

from __future__ import annotations

import dataclasses

from rackform.acceptance.argv import serving_argv, serving_thresholds
from rackform.catalog import Figure, load_catalog
from validators.serving_smoke import parse

H100 = load_catalog().gpu("H100-SXM")
WORKLOAD = {
    "concurrency": 32,
    "prompt_tokens": 1024,
    "output_tokens": 256,
    "ttft_p99_ms": 2000,
    "itl_p99_ms": 60,
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "dtype_bytes": 2,
}


def test_the_catalog_bandwidth_goes_in_and_an_unmeasured_floor_stays_out():
    argv = serving_argv(**WORKLOAD, gpu=H100, model_path="/mnt/models/llama", price_usd_hr=98.32)
    args = parse(argv)
    assert args.hbm_tbps == 3.35 and args.gpu_model == "H100-SXM" and args.mbu_min is None
    assert (args.kv_heads, args.concurrency, args.model_path) == (8, 32, "/mnt/models/llama")
    bw, floor = serving_thresholds(H100)
    assert "nvidia-h100" in bw.source and "still to be measured" in floor.source


def test_a_calibrated_floor_is_passed_with_its_source():
    src = H100.hbm_tbps.source
    measured = dataclasses.replace(H100, serving_mbu_pct_min=Figure(55.0, src))
    assert parse(serving_argv(**WORKLOAD, gpu=measured)).mbu_min == 55.0
    assert "serving_mbu_pct_min" in serving_thresholds(measured)[1].source


def test_no_gpu_gives_no_bandwidth():
    args = parse(serving_argv(**WORKLOAD, gpu=None, expected_peak_bytes=21_000_000_000))
    assert args.hbm_tbps is None and args.gpu_model is None
    assert args.expected_peak_bytes == 21_000_000_000
