"""`rackform reap` with a user's state from the release before the one state directory: with
neither variable set and no --state-dir, it reads the warning an earlier reap gave (its audit log
in ~/.rackform/reap) and goes on from it; given a --state-dir, only that directory. Against the
local Slurm through the ssh seam, and a real Prometheus on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from blueprint_helpers import ROOT
from clusters import history
from servers import prometheus
from slurm_local import blueprint, ssh_env

from rackform.reap.snooze import iso

STACK = "slurm-a-default"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with prometheus(history("slurm-a", 2), tmp_path_factory.mktemp("prom"), time.time()) as url:
        yield url


def env_of(slurm, tmp_path) -> dict[str, str]:
    """The ssh seam's environment, with a home of the test's and neither variable set."""
    env = {**ssh_env(slurm, tmp_path), "HOME": str(tmp_path / "home")}
    env.pop("RACKFORM_ROLLOUT_DIR", None)
    env.pop("RACKFORM_REAP_DIR", None)
    (tmp_path / "home").mkdir(mode=0o700)
    return env


def rackform(env, *args):
    r = subprocess.run([sys.executable, "-m", "rackform", *map(str, args), "--json"],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=180)  # fmt: skip
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_reap_reads_the_warning_an_earlier_release_gave(prom, slurm, tmp_path):
    env = env_of(slurm, tmp_path)
    bp = tmp_path / "graced.yaml"
    bp.write_text(blueprint(grace=30))
    old = tmp_path / "home" / ".rackform" / "reap"
    old.mkdir(parents=True)
    warned = time.time() - 600
    warn = {"ts": warned, "run": "earlier", "event": "warn", "state": "sent", "stack": STACK,
            "action": "drain", "cluster": "slurm-a"}  # fmt: skip
    (old / "audit.jsonl").write_text(json.dumps(warn) + "\n")
    code, doc = rackform(env, "reap", bp, "--prometheus", prom)
    assert code == 0, doc
    [d] = doc["clusters"]
    assert (d["verdict"], d["action"], d["step"]) == ("idle", "drain", None)
    assert d["grace"]["warned"] == iso(warned)
    assert any(r.startswith(f"warned at {iso(warned)}; drain after") for r in d["reasons"])
    # Given another --state-dir, the same reaper finds no warning there and would warn anew.
    code, doc = rackform(env, "reap", bp, "--prometheus", prom, "--state-dir", tmp_path / "fresh")
    assert doc["clusters"][0]["step"] == "warn"
    assert set(slurm.node_states().values()) == {"idle"}
