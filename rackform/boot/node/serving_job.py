"""The serving smoke job a serving node runs at the end of its bootstrap, after the read-only
serving checks and before it takes traffic (the launch hook is completed only on a pass):
`validators.serving_smoke` from the artifact's collection, in the smoke job's environment the
node's image holds (`smoke_train_venv`: torch, baked, so nothing is installed at boot), on the
node's own scratch, which it removes. Its checks join the node's report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rackform.boot.node.log import LOG, log

SMOKE_VENV = "/opt/rackform/venv"  # the smoke_train role's default smoke_train_venv
# The job bounds itself (its --deadline-s and a backstop); this is only the bootstrap's bound.
GRACE_S = 120


def _failed(detail: str) -> list[dict]:
    return [
        {"name": "serving_smoke", "status": "fail", "measured": None, "expected": "a report",
         "unit": "", "detail": detail}
    ]  # fmt: skip


def _deadline(argv: list[str]) -> float:
    try:
        return float(argv[argv.index("--deadline-s") + 1])
    except (ValueError, IndexError):
        return 900.0


def serving_job(argv: list[str], validators: Path, venv: str | None) -> list[dict]:
    """Run the job with `argv` (rackform's: the workload, the model, the GPU's figures) and
    return its checks; a job that wrote no report is one failed `serving_smoke` check."""
    python = f"{(venv or SMOKE_VENV).rstrip('/')}/bin/python"
    work = Path(tempfile.mkdtemp(prefix="rackform-serving."))
    report = work / "report.json"
    cmd = [python, "-m", "validators.serving_smoke", "--report", str(report), "--no-table",
           "--scratch", str(work), *argv]  # fmt: skip
    log("$ " + " ".join(cmd))
    env = {**os.environ, "PYTHONPATH": str(validators)}
    try:
        with LOG.open("a", encoding="utf-8") as out:
            done = subprocess.run(
                cmd, cwd=validators, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, timeout=_deadline(argv) + GRACE_S,
            )  # fmt: skip
        log(f"the serving smoke job exited {done.returncode}")
        doc = json.loads(report.read_text(encoding="utf-8"))
        checks = doc["checks"]
        if not isinstance(checks, list):
            raise ValueError("its checks are not a list")
        return checks
    except subprocess.TimeoutExpired:
        return _failed(f"the serving smoke job ran past {_deadline(argv) + GRACE_S:g} s")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _failed(f"the serving smoke job wrote no report ({exc}); the log above says why")
    finally:
        shutil.rmtree(work, ignore_errors=True)
