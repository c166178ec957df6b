"""The bootstrap's log: each line printed with its time and appended to LOG, and the commands it
runs, with their output going to the log."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

LOG = Path("/var/log/rackform-bootstrap.log")


def log(line: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = f"{stamp} rackform-bootstrap: {line}"
    print(text, flush=True)
    with LOG.open("a", encoding="utf-8") as f:
        f.write(text + "\n")


def run(argv: list[str], **kw) -> None:
    log("$ " + " ".join(argv))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", **kw.pop("env", {})}
    with LOG.open("a", encoding="utf-8") as out:
        subprocess.run(argv, check=True, stdout=out, stderr=subprocess.STDOUT, env=env, **kw)
