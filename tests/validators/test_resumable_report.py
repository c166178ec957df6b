"""The resumable job's final report, on the GPU's branch, on CPU: `final_checks` reads the
device for its kind only, so a `torch.device("cuda")` (which needs no GPU) takes the branch a
CUDA run takes. Before, the report rebuilt the run from its losses alone, with no timings, and
every complete run on a GPU failed MFU with "no timed steps"."""

from __future__ import annotations

import pytest
import torch

from validators.report import FAIL, NOT_RUN, PASS
from validators.resumable_train import final_checks, parse
from validators.train import TrainResult

CUDA = torch.device("cuda")  # a device object needs no GPU
PARAMS = 390_000_000
FALLING = [10.7, 8.0, 5.0, 1.0, 0.5, 0.1]


def args(tmp_path, *extra: str):
    return parse(["--device", "cuda", "--steps", "120", "--checkpoint-dir", str(tmp_path), *extra])


def mfu(tmp_path, timed=(110, 11.0), ran=120, step=120, *extra: str):
    a = args(tmp_path, "--peak-tflops", "989", "--mfu-min", "25", *extra)
    metrics: dict = {}
    t = TrainResult(timed_steps=timed[0], timed_s=timed[1])
    checks = final_checks(a, metrics, FALLING, t, ran, step, PARAMS, CUDA, 1)
    return {c.name: c for c in checks}["mfu"], metrics, a


def test_the_peak_and_floor_reach_the_job_as_they_reach_the_smoke_job(tmp_path):
    a = args(tmp_path, "--peak-tflops", "989", "--mfu-min", "25")
    assert (a.peak_tflops, a.mfu_min) == (989.0, 25.0)
    assert a.warmup == 10  # steps / 5, at most 10: the steps this process does not time


def test_a_complete_gpu_run_measures_mfu_over_the_steps_this_process_timed(tmp_path):
    check, metrics, a = mfu(tmp_path)
    tps = a.model.batch * a.model.seq_len / (11.0 / 110)
    want = 100 * 6 * PARAMS * tps / (989 * 1e12)
    assert check.status == PASS and check.measured == round(want, 2), check
    assert metrics["training"]["timed_steps"] == 110
    assert metrics["training"]["tokens_per_s"] == pytest.approx(tps)


def test_a_slow_gpu_still_fails_the_floor(tmp_path):
    check, _m, _a = mfu(tmp_path, timed=(110, 11_000.0))
    assert check.status == FAIL and check.measured < 25


@pytest.mark.parametrize(
    "timed, ran, step, why",
    [
        ((0, 0.0), 0, 120, "nothing left to run: resumed at step 120"),
        ((0, 0.0), 5, 120, "this run's 5 steps (from step 115) were all warm-up"),
    ],
)
def test_a_run_with_no_step_to_time_reports_mfu_not_run_never_failed(
    tmp_path, timed, ran, step, why
):
    check, _m, _a = mfu(tmp_path, timed, ran, step)
    assert check.status == NOT_RUN and why in check.detail, check


def test_without_a_known_peak_mfu_is_not_run(tmp_path):
    a = args(tmp_path)
    checks = final_checks(a, {}, FALLING, TrainResult(), 120, 120, PARAMS, CUDA, 1)
    check = {c.name: c for c in checks}["mfu"]
    assert check.status == NOT_RUN and "--peak-tflops" in check.detail
