"""A recording fake of the `pulumi` CLI, for the preview/up/destroy wrapper tests.

The Automation API shells out to `pulumi`; this machine has no Pulumi CLI and must not download
one, so the tests put this script on PATH. It appends every invocation (argv, cwd, backend) to
$FAKE_PULUMI_LOG as a JSON line, keeps stacks and their config in $FAKE_PULUMI_STATE, answers the
Automation API's questions the way the real CLI does (`version`, `stack select/init`,
`config set-all`, `config --json`, `stack output`, `stack history`, `stack export`, the engine event
log), moves resources between stacks' states as `pulumi state move` does, and exits from an
operation with $FAKE_PULUMI_EXIT (default 0); a destroy empties the stack's state.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

SCRIPT = r"""
import json, os, sys

argv = sys.argv[1:]
with open(os.environ["FAKE_PULUMI_LOG"], "a") as f:
    f.write(json.dumps({
        "argv": argv,
        "cwd": os.getcwd(),
        "backend": os.environ.get("PULUMI_BACKEND_URL"),
    }) + "\n")
args = [a for a in argv if a != "--non-interactive"]
state_path = os.environ["FAKE_PULUMI_STATE"]
state = json.load(open(state_path)) if os.path.exists(state_path) else {"stacks": {}}


def opt(name):
    return args[args.index(name) + 1] if name in args else None


def save():
    json.dump(state, open(state_path, "w"))


if args[:1] == ["version"]:
    print("v3.200.0")
    sys.exit(0)
if args[:2] == ["stack", "select"]:
    name = opt("--stack")
    if name not in state["stacks"]:
        print(f"error: no stack named '{name}' found", file=sys.stderr)
        sys.exit(255)
    sys.exit(0)
if args[:2] == ["stack", "init"]:
    state["stacks"][args[2]] = {}
    save()
    sys.exit(0)
if args[:2] == ["config", "set-all"]:
    name = opt("--stack")
    pairs = [args[i + 1] for i, a in enumerate(args) if a == "--plaintext"]
    state["stacks"][name].update(dict(p.split("=", 1) for p in pairs))
    save()
    sys.exit(0)
if args[:1] == ["config"] and "--json" in args:
    # The stack's config as `pulumi config --show-secrets --json` prints it.
    held = state["stacks"].get(opt("--stack"), {})
    print(json.dumps({k: {"value": v, "secret": False} for k, v in held.items()}))
    sys.exit(0)
if args[:2] == ["stack", "output"]:
    # What the engine recorded at the stack's last update (set by a test: set_outputs).
    print(json.dumps(state.get("outputs", {}).get(opt("--stack"), {})))
    sys.exit(0)
if args[:2] == ["stack", "export"]:
    # The stack's state as `pulumi stack export` prints it (its resources set by a test:
    # set_resources; an update's program is not run here).
    held = state.get("deployments", {}).get(opt("--stack"), [])
    print(json.dumps({"version": 3, "deployment": {"resources": held}}))
    sys.exit(0)
if args[:2] == ["state", "move"]:
    # As `pulumi state move` does to the two states: the resources named by URN (and their
    # children) leave the source, renamed into the destination stack.
    source, dest = opt("--source"), opt("--dest")
    if dest not in state["stacks"]:
        print(f"error: no stack named '{dest}' found", file=sys.stderr)
        sys.exit(255)
    deployments = state.setdefault("deployments", {})
    held = deployments.get(source, [])
    urns = [a for a in args[2:] if a.startswith("urn:")]
    moving = [r for r in held if r["urn"] in urns or r.get("parent") in urns]
    if not moving:
        print("error: no resources found to move", file=sys.stderr)
        sys.exit(255)
    deployments[source] = [r for r in held if r not in moving]
    prefix = f"urn:pulumi:{source}::"
    deployments.setdefault(dest, []).extend(
        {**r, "urn": f"urn:pulumi:{dest}::" + r["urn"].removeprefix(prefix)} for r in moving
    )
    save()
    print(f"Successfully moved resources from {source} to {dest}")
    sys.exit(0)
if args[:2] == ["stack", "history"]:
    print(json.dumps([{
        "kind": "update", "startTime": "2026-01-01T00:00:00.000Z", "message": "",
        "environment": {}, "config": {}, "result": "succeeded",
        "endTime": "2026-01-01T00:00:01.000Z", "version": 1, "resourceChanges": {},
    }]))
    sys.exit(0)
if args and args[0] in ("preview", "up", "destroy"):
    log = opt("--event-log")
    if log:
        event = {"sequence": 1, "timestamp": 1, "summaryEvent": {
            "maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": {"create": 1},
            "PolicyPacks": {}}}
        # Like the real CLI: the summary, then the cancel event that closes the log.
        with open(log, "a") as f:
            f.write(json.dumps(event) + "\n")
            f.write(json.dumps({"sequence": 2, "timestamp": 2, "cancelEvent": {}}) + "\n")
    print(f"fake pulumi {args[0]} on stack {opt('--stack')}")
    code = int(os.environ.get("FAKE_PULUMI_EXIT", "0"))
    if code:
        print(f"error: fake {args[0]} failed", file=sys.stderr)
    elif args[0] == "destroy" and opt("--stack") in state.get("deployments", {}):
        state["deployments"][opt("--stack")] = []  # a destroy leaves the stack empty
        save()
    sys.exit(code)
print(f"fake pulumi: unexpected arguments {args}", file=sys.stderr)
sys.exit(99)
"""


def install(bin_dir: Path) -> Path:
    """Write the fake as `bin_dir/pulumi`, run by this test's Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "pulumi"
    exe.write_text(f"#!{sys.executable}\n{SCRIPT}", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def set_outputs(tmp: Path, stack: str, outputs: dict) -> None:
    """Record `outputs` as the stack's, as the engine does at the end of an update (the
    program's exports); the fake then answers `pulumi stack output` with them."""
    path = tmp / "pulumi-state.json"
    state = json.loads(path.read_text()) if path.exists() else {"stacks": {}}
    state.setdefault("stacks", {}).setdefault(stack, {})
    state.setdefault("outputs", {})[stack] = outputs
    path.write_text(json.dumps(state))


def set_resources(tmp: Path, stack: str, urns: list[str]) -> None:
    """Record a stack's state as holding resources with these URNs (what `pulumi stack export`
    then shows), as the engine would after an update."""
    path = tmp / "pulumi-state.json"
    state = json.loads(path.read_text()) if path.exists() else {"stacks": {}}
    state.setdefault("stacks", {}).setdefault(stack, {})
    state.setdefault("deployments", {})[stack] = [
        {"urn": u, "type": u.split("::")[2].rsplit("$", 1)[-1]} for u in urns
    ]
    path.write_text(json.dumps(state))


def held(tmp: Path, stack: str) -> list[str]:
    """The URNs a stack's state holds now."""
    state = json.loads((tmp / "pulumi-state.json").read_text())
    return [r["urn"] for r in state.get("deployments", {}).get(stack, [])]


def config_of(tmp: Path, stack: str) -> dict[str, str]:
    """A stack's config as the fake holds it."""
    return json.loads((tmp / "pulumi-state.json").read_text())["stacks"].get(stack, {})


def environ(bin_dir: Path, tmp: Path, **extra: str) -> dict[str, str]:
    """An environment with the fake first on PATH and its log and state under `tmp`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "RACKFORM_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        FAKE_PULUMI_LOG=str(tmp / "pulumi.log"),
        FAKE_PULUMI_STATE=str(tmp / "pulumi-state.json"),
        RACKFORM_STATE=str(tmp / "state"),
        PULUMI_CONFIG_PASSPHRASE="test",
    )
    env.update(extra)
    return env
