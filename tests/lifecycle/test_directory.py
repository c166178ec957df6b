"""The one state directory, found from --state-dir, $RACKFORM_ROLLOUT_DIR or $RACKFORM_REAP_DIR,
else ~/.rackform/lifecycle; and a user's files from before it (reap's audit log, snoozes and
locks in ~/.rackform/reap or $RACKFORM_REAP_DIR, the rollouts' and heal's records in
~/.rackform/rollout or $RACKFORM_ROLLOUT_DIR) found where they are, read and written in place."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rackform.health.apply import failures
from rackform.lifecycle.directory import StateDir, state_dir
from rackform.lifecycle.lock import Held
from rackform.lifecycle.record import Store, new_record
from rackform.lifecycle.status import in_maintenance
from rackform.reap import snooze
from rackform.reap.notify import Notifier
from rackform.reap.run import World, reap_lock

STACK = "gpu-a-prod"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A user's home with neither variable set."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RACKFORM_ROLLOUT_DIR", raising=False)
    monkeypatch.delenv("RACKFORM_REAP_DIR", raising=False)
    return tmp_path / "home"


def earlier_release(reap: Path, rollout: Path) -> None:
    """What a run of the release before the one directory left: a reap warning, a snooze, a
    stopped rollout, a heal failure and the stack's lock file."""
    reap.mkdir(parents=True)
    warn = {"ts": time.time() - 600, "run": "r1", "event": "warn", "state": "sent",
            "stack": STACK, "action": "stop"}  # fmt: skip
    (reap / "audit.jsonl").write_text(json.dumps(warn) + "\n")
    (reap / "snoozes.json").write_text(json.dumps({"b-dev": {"until": 2e9, "reason": "demo"}}))
    rec = new_record(STACK, "sha256:" + "ab" * 32, "drain", [["n1"], ["n2"]], {}, {})
    rec.status = "stopped"
    Store(rollout, STACK).write(rec)
    Store(rollout, STACK, kind="heal").audit("batch", kind="heal", batch=1, nodes=["n3"],
                                             status="failed", why="")  # fmt: skip
    (rollout / f"{STACK}.lock").touch()


def test_the_directory_is_found_as_the_variables_and_option_say(home, tmp_path):
    default = home / ".rackform" / "lifecycle"
    old_reap, old_rollout = home / ".rackform" / "reap", home / ".rackform" / "rollout"
    assert state_dir() == StateDir(default, (old_reap, old_rollout))
    r, v = str(tmp_path / "r"), str(tmp_path / "v")
    assert state_dir(environ={"RACKFORM_REAP_DIR": r}) == StateDir(Path(r), (old_rollout,))
    assert state_dir(environ={"RACKFORM_ROLLOUT_DIR": v}) == StateDir(Path(v), (old_reap,))
    both = {"RACKFORM_REAP_DIR": r, "RACKFORM_ROLLOUT_DIR": v}
    assert state_dir(environ=both) == StateDir(Path(v), (Path(r),))
    assert state_dir(environ={"RACKFORM_REAP_DIR": v, "RACKFORM_ROLLOUT_DIR": v}) == StateDir(
        Path(v)
    )
    # --state-dir is the only place: nothing of an earlier release is looked for elsewhere.
    assert state_dir(tmp_path / "given", environ=both) == StateDir(tmp_path / "given")
    assert state_dir(Path("~/x")) == StateDir(home / "x")


def test_an_earlier_releases_default_directories_are_read_and_kept_in_place(home):
    old_reap, old_rollout = home / ".rackform" / "reap", home / ".rackform" / "rollout"
    earlier_release(old_reap, old_rollout)
    where = state_dir()
    assert where.path == home / ".rackform" / "lifecycle"
    # reap's audit log: the standing warning, and a new entry appended to the same log.
    world = World(where, Notifier(), None, reapers=lambda target: None)
    assert world.audit.path == old_reap / "audit.jsonl"
    assert world.audit.warning(STACK, "stop")["run"] == "r1"
    world.audit.append({"event": "withdrawn", "stack": STACK, "action": "stop"})
    assert world.audit.warning(STACK, "stop") is None
    assert len((old_reap / "audit.jsonl").read_text().splitlines()) == 2
    # Snoozes: read there, and a new one written beside the old.
    assert snooze.active(where, "b-dev", time.time())["reason"] == "demo"
    snooze.set_snooze(where, "c-dev", {"until": 2e9, "reason": "more"})
    assert set(json.loads((old_reap / "snoozes.json").read_text())) == {"b-dev", "c-dev"}
    # The stopped rollout: read, resumed from, and what reap sees of it.
    store = Store(where, STACK)
    assert store.path == old_rollout / f"{STACK}.json" and store.read().status == "stopped"
    assert in_maintenance(where, STACK) == "a rolling change is stopped at batch 1 of 2"
    # heal's failures, counted from the old log.
    assert failures(Store(where, STACK, kind="heal"), 0) == {"n3": 1}
    # The stack's lock is the earlier release's file, so a run of either release sees the other.
    assert store.lock_path == old_rollout / f"{STACK}.lock"
    with (
        store.lock(),
        pytest.raises(Held, match="a rolling change or heal is in progress"),
        Store(where, STACK, kind="heal").lock(),
    ):
        pass
    # What only the new release makes goes into the one directory.
    Store(where, "other-dev").set_applied({"a": 1}, {}, "sha256:x")
    assert (where.path / "other-dev.applied.json").exists()
    assert reap_lock(where, "other-dev").path == where.path / "locks" / "other-dev.lock"
    assert not (old_reap / "locks").exists() and not (old_rollout / "other-dev.json").exists()


def test_each_variable_still_names_where_its_files_are(home, tmp_path, monkeypatch):
    r, v = tmp_path / "reap-dir", tmp_path / "rollout-dir"
    earlier_release(r, v)
    monkeypatch.setenv("RACKFORM_REAP_DIR", str(r))
    monkeypatch.setenv("RACKFORM_ROLLOUT_DIR", str(v))
    where = state_dir()
    assert where.path == v
    assert World(where, Notifier(), None, lambda t: None).audit.warning(STACK, "stop")
    assert snooze.active(where, "b-dev", time.time()) is not None
    assert in_maintenance(where, STACK) == "a rolling change is stopped at batch 1 of 2"
    # One variable alone: the other trigger's files are found in their old default.
    monkeypatch.delenv("RACKFORM_ROLLOUT_DIR")
    old = home / ".rackform" / "rollout"
    Store(old, "c-dev").write(new_record("c-dev", "sha256:x", "drain", [["n1"]], {}, {}))
    where = state_dir()
    assert where.path == r
    assert Store(where, "c-dev").path == old / "c-dev.json" and Store(where, "c-dev").read()


def test_a_given_state_dir_is_the_only_place_looked_in(home, tmp_path):
    earlier_release(home / ".rackform" / "reap", home / ".rackform" / "rollout")
    where = state_dir(tmp_path / "given")
    assert World(where, Notifier(), None, lambda t: None).audit.warning(STACK, "stop") is None
    assert Store(where, STACK).read() is None and in_maintenance(where, STACK) is None
    assert snooze.read(where) == {}
