"""The resumable job's checkpoint directory and signal flags (validators/resume.py), without
torch: which checkpoints count as there (only whole ones), which one every node can resume from,
what is kept, and what SIGTERM and SIGUSR1 ask for."""

from __future__ import annotations

import os
import signal

import pytest

from validators.resume import Signals, Store, common_step


def staged(store: Store, step: int, **progress) -> str:
    tmp = store.begin(step)
    (open(os.path.join(tmp, "0.distcp"), "wb")).close()
    return store.publish(step, {"step": step, **progress})


def test_only_whole_checkpoints_count_and_the_newest_are_kept(tmp_path):
    store = Store(str(tmp_path), keep=2)
    assert store.steps() == []
    for step in (10, 20, 30):
        staged(store, step, losses=[1.0] * step)
    store.begin(40)  # a save cut short: staged, never published
    (tmp_path / "step-00000050").mkdir()  # no progress.json: not a checkpoint
    assert store.steps() == [20, 30]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".step-00000040.tmp", "step-00000020", "step-00000030", "step-00000050",
    ]  # fmt: skip
    assert store.progress(30)["losses"] == [1.0] * 30
    # The next save of step 40 starts afresh from whatever the cut-short one left.
    staged(store, 40)
    assert store.steps() == [30, 40] and not (tmp_path / ".step-00000040.tmp").exists()


def test_a_missing_directory_has_no_checkpoints(tmp_path):
    assert Store(str(tmp_path / "nope")).steps() == []


@pytest.mark.parametrize(
    ("per_rank", "step"),
    [
        ([[10, 20], [10, 20]], 20),
        ([[10, 20], [10]], 10),  # one node's newest save did not finish
        ([[20, 30], [10]], 0),  # nothing in common (a replaced node): start afresh
        ([[], [10]], 0),
        ([], 0),
    ],
)
def test_the_resume_step_is_the_newest_every_rank_holds(per_rank, step):
    assert common_step(per_rank) == step


def test_sigusr1_asks_for_a_checkpoint_and_sigterm_also_for_a_stop():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        flags = Signals().install()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert (flags.save, flags.stop, flags.why()) == (True, False, "SIGUSR1")
        flags.save = False
        os.kill(os.getpid(), signal.SIGTERM)
        assert (flags.save, flags.stop, flags.why()) == (True, True, "SIGTERM")
    finally:
        for s, h in before.items():
            signal.signal(s, h)
