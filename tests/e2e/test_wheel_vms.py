"""rackform as a user installs it: the wheel `python -m build` made (tests/dist_build.py),
installed with its `deploy` extra into a fresh virtualenv, and every command run from an empty
directory with a clean environment (no PYTHONPATH, nothing of this checkout on any path):
init (a team's repository, whose blueprint validates and plans), validate, plan, compile,
configure against the session's testbed (node1, as it is: fresh, or converged by another
file), smoke (after torch is installed, as a user does), testbed, and
preview/up, which say the Pulumi CLI is missing. Ansible's own event log shows every task it
ran came from the collection inside that virtualenv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from smoke_helpers import isolated
from vms import ROOT, blueprint, find_torch_wheel, shown

pytestmark = pytest.mark.slow

ROLES = ["--role", "nccl_rdma"]  # one role shows where the tasks came from
CACHE_ENV = ("XDG_CACHE_HOME", "RACKFORM_CACHE", "RACKFORM_TESTBED_CACHE")


class Installed:
    """A fresh virtualenv with the wheel installed, and its `rackform` run from `cwd`."""

    def __init__(self, venv: Path, cwd: Path):
        self.venv, self.cwd = venv, cwd
        self.env = {
            "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            "GLOO_SOCKET_IFNAME": "lo",
            # rackform's cache (the testbed's image) where this session keeps it.
            **{k: os.environ[k] for k in CACHE_ENV if os.environ.get(k)},
        }

    def run(self, *args, timeout: float = 900, prefix=()) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*prefix, *map(str, args)],
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def rackform(self, *args, timeout: float = 900, prefix=()) -> subprocess.CompletedProcess:
        return self.run(self.venv / "bin" / "rackform", *args, timeout=timeout, prefix=prefix)

    def pip(self, *args) -> None:
        # --no-compile: what is imported is compiled when first imported; byte-compiling all of
        # ansible's collections and torch up front was 57 of the 95 s of the install here (idle
        # machine), and it proves nothing (pip does not fail on a file it cannot compile).
        done = self.run(
            self.venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile",
            "--disable-pip-version-check", *args, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, shown(done)


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory, phases) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    venv, empty = base / "venv", base / "work"
    empty.mkdir()
    with phases("wheel: fresh virtualenv, pip install 'rackform[deploy]' from the built wheel"):
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        user = Installed(venv, empty)
        user.pip(f"{dist.wheel}[deploy]")
    return user


def test_the_installed_wheel_runs_every_command_from_an_empty_directory(
    installed, testbed, apt_repo, phases, tmp_path
):
    user = installed
    where = user.run(
        user.venv / "bin" / "python",
        "-c",
        "import rackform, rackform.paths as p; print(rackform.__file__); print(p.collection())",
    )
    package, collection = where.stdout.split()
    assert package.startswith(str(user.venv)) and collection.startswith(str(user.venv)), where
    assert not package.startswith(str(ROOT))

    # init: a team's new repository, in the empty directory; its blueprint validates and plans.
    made = user.rackform("init", "team", "--target", "bare_metal", "--purpose", "inference")
    assert made.returncode == 0, shown(made)
    team = user.cwd / "team"
    (new_bp,) = (team / "blueprints").glob("*.yaml")
    for args in (("validate", new_bp), ("plan", new_bp, "--env", "prod")):
        r = user.rackform(*args)
        assert r.returncode == 0, shown(r)
    again = user.rackform("init", "team")
    assert again.returncode == 2 and "exists" in again.stderr, shown(again)

    bp = blueprint(testbed, tmp_path)
    assert user.rackform("validate", bp).returncode == 0
    plan = user.rackform("plan", bp, "--env", "wipe")
    assert plan.returncode == 0 and "node1" in plan.stdout, shown(plan)
    out = user.cwd / "compiled"
    compiled = user.rackform("compile", bp, "--env", "wipe", "-o", out)
    assert compiled.returncode == 0, shown(compiled)
    assert sorted(p.name for p in out.iterdir()), shown(compiled)

    # configure: the installed collection's roles over node1 (fresh, or converged already).
    events = tmp_path / "events"
    key = ["--private-key", testbed.key, "--known-hosts", testbed.known_hosts]
    with phases("wheel: configure nccl_rdma on node1 from the installed wheel"):
        conf = user.rackform(
            "configure", bp, "--env", "wipe", "--limit", "node1", *ROLES, *key,
            "--artifacts", events,
        )  # fmt: skip
    assert conf.returncode == 0, shown(conf)
    paths = set()
    for f in events.rglob("job_events/*.json"):
        path = json.loads(f.read_text()).get("event_data", {}).get("task_path")
        if path:
            paths.add(path.rsplit(":", 1)[0])
    assert any("/roles/nccl_rdma/" in p for p in paths), sorted(paths)
    assert all(p.startswith(collection) for p in paths), sorted(paths)

    # smoke: without torch, one line saying so; with the CPU torch a user installs, it passes.
    missing = user.rackform("smoke", "--no-host-checks", timeout=120)
    assert missing.returncode == 1 and "needs torch" in missing.stderr, shown(missing)
    assert "Traceback" not in missing.stderr, shown(missing)
    wheel = find_torch_wheel()
    if wheel is None:
        pytest.fail("no local CPU torch wheel (scripts/setup.sh --test provides one)")
    with phases("wheel: pip install the CPU torch, then rackform smoke (tiny, 2 ranks)"):
        user.pip(str(wheel), "numpy")
        ckpt = tmp_path / "ckpt"
        ckpt.mkdir()
        smoke = user.rackform(
            "smoke", "--no-host-checks", "--steps", "12", "--checkpoint-dir", ckpt,
            "--", "--allreduce-max-mb", "0.25", timeout=600, prefix=isolated(),
        )  # fmt: skip
    assert smoke.returncode == 0 and "smoke: PASSED" in smoke.stdout, shown(smoke)

    # testbed: the cached base image is found and verified from the installed package.
    image = user.rackform("testbed", "image", timeout=600)
    assert image.returncode == 0, shown(image)

    # up / preview: no Pulumi CLI here; one clear line, nothing created, no traceback.
    for op in ("preview", "up"):
        r = user.rackform(op, bp, "--env", "wipe", timeout=120)
        assert r.returncode != 0 and "pulumi" in r.stderr.lower(), shown(r)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, shown(r)
