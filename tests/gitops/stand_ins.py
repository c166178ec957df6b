"""The recording `pulumi` stand-in of tests/cli/fake_pulumi.py, loaded from there. This machine
has no Pulumi CLI and must not download one; the stand-in on PATH records what rackform asks
of it (the Automation API shells out to `pulumi`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "fake_pulumi", Path(__file__).resolve().parents[1] / "cli" / "fake_pulumi.py"
)
fake_pulumi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_pulumi)

# `pulumi refresh --preview-only`, added in front of the fake's own handling: the engine events
# of a refresh that found $FAKE_DRIFT_URNS (comma-separated "op=urn") changed, then a summary.
REFRESH = r"""
import json, os, sys
_args = [a for a in sys.argv[1:] if a != "--non-interactive"]
if _args[:1] == ["refresh"]:
    with open(os.environ["FAKE_PULUMI_LOG"], "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd()}) + "\n")
    log = _args[_args.index("--event-log") + 1]
    found = [p.split("=", 1) for p in os.environ.get("FAKE_DRIFT_URNS", "").split(",") if p]
    events, counts = [], {"same": 3}
    for i, (op, urn) in enumerate(found):
        events.append({"sequence": i + 1, "timestamp": 1, "resourcePreEvent": {"metadata": {
            "op": op, "urn": urn, "type": urn.split("::")[2].split("$")[-1],
            "provider": "", "diffs": ["gpus"] if op == "update" else []}}})
        counts[op] = counts.get(op, 0) + 1
    events.append({"sequence": 99, "timestamp": 2, "summaryEvent": {
        "maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": counts,
        "PolicyPacks": {}}})
    events.append({"sequence": 100, "timestamp": 3, "cancelEvent": {}})
    with open(log, "a") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
    print("fake pulumi refresh --preview-only")
    sys.exit(0)
"""


def install(bin_dir: Path) -> Path:
    exe = fake_pulumi.install(bin_dir)
    head, body = exe.read_text().split("\n", 1)
    exe.write_text(f"{head}\n{REFRESH}\n{body}")
    return exe


def calls(tmp: Path) -> list[list[str]]:
    log = tmp / "pulumi.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["argv"] for line in lines]


def operations(tmp: Path) -> list[str]:
    return [a[1] for a in calls(tmp) if a[:1] == ["--non-interactive"] and len(a) > 1]
