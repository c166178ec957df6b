"""The job's heartbeat gauge for rackform reap: node_exporter's textfile format, replaced whole,
at most once per MIN_INTERVAL_S, and never a reason for the job to fail."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from validators.heartbeat import METRIC, MIN_INTERVAL_S, Heartbeat
from validators.watchdog import Watchdog


class Clock:
    def __init__(self):
        self.t = 1_800_000_000.0

    def __call__(self):
        return self.t


def value(path) -> float:
    return float(path.read_text().splitlines()[-1].split()[1])


def test_a_completed_step_writes_the_time_and_steps_in_between_do_not(tmp_path):
    clock, path = Clock(), tmp_path / "hb.prom"
    hb = Heartbeat(str(path), clock)
    wd = Watchdog(0, rank=0, exported=hb)
    wd.beat("training")  # a phase change is not a completed step
    assert not path.exists()
    wd.beat("training", 0)
    assert value(path) == clock.t
    first = clock.t
    clock.t += MIN_INTERVAL_S / 2
    wd.beat("training", 1)
    assert value(path) == first  # rate-limited
    clock.t += MIN_INTERVAL_S
    wd.beat("training", 2)
    assert value(path) == clock.t
    assert [p.name for p in tmp_path.iterdir()] == ["hb.prom"]  # no temporary file left


def test_the_file_is_valid_exposition_format(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run scripts/setup.sh --test")
    path = tmp_path / "hb.prom"
    Heartbeat(str(path)).beat()
    done = subprocess.run([promtool, "check", "metrics"], input=path.read_text(),
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert METRIC in path.read_text()


def test_no_path_writes_nothing_and_an_unwritable_one_never_raises(tmp_path):
    Heartbeat(None).beat()
    Heartbeat(str(tmp_path / "missing" / "hb.prom")).beat()
    assert list(tmp_path.iterdir()) == []
