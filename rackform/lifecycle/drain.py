"""Draining a cluster's nodes through Slurm, on the controller: `scontrol update state=drain`
for each node, so Slurm starts nothing new there and lets the jobs running on it finish (it never
kills one: a node with jobs is DRAINING until they end, then DRAINED). A node already draining or
drained is left as it is (its reason too: the first drain's reason stays). scontrol runs as the
ssh user; where Slurm refuses it (an unprivileged user), once more through `sudo -n`.

One script on the controller for every node; each node's outcome is its own line."""

from __future__ import annotations

from collections.abc import Sequence

from rackform.lifecycle.outcome import Outcome
from rackform.lifecycle.states import SUFFIXES
from rackform.scheduler.remote import RemoteError, Runner

TIMEOUT_S = 120
# `sc ARGS`: scontrol ARGS as the ssh user; where Slurm refuses it (an unprivileged user), once
# more through `sudo -n`. Its output (the error, where it failed) is left in $out. The drain,
# the requeue and the return to service share it.
SCONTROL = r"""sc() {
  out=$(scontrol "$@" 2>&1) && return 0
  case $out in *[Pp]ermission*) ;; *) return 1 ;; esac
  [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 || return 1
  out=$(sudo -n scontrol "$@" 2>&1)
}
"""
# $1: the reason; $2...: the nodes. Per node one line `node|result|state after|message`.
SCRIPT = (
    SCONTROL
    + r"""reason=$1; shift
state() {
  s=$(sinfo --noheader --Node --nodes="$1" --format=%T 2>&1) || { echo "$s" | tail -n 1; return 1; }
  echo "$s" | head -n 1
}
flat() { echo "$1" | tr '\n|' '  '; }
for n in "$@"; do
  if ! before=$(state "$n"); then printf '%s|unread||%s\n' "$n" "$(flat "$before")"; continue; fi
  case $before in
    '') printf '%s|missing||\n' "$n"; continue ;;
    *drain*) printf '%s|already|%s|\n' "$n" "$before"; continue ;;
  esac
  if sc update nodename="$n" state=drain reason="$reason"; then result=drained; else result=failed; fi
  printf '%s|%s|%s|%s\n' "$n" "$result" "$(state "$n")" "$(flat "$out")"
done
"""
)
# One line a node (a node in two partitions: twice), the reason last: it may hold anything but a newline.
NODE_REASONS = "exec sinfo --noheader --Node --format='%N|%T|%E'\n"


def _outcome(node: str, result: str, state: str, message: str) -> Outcome:
    state = state.rstrip(SUFFIXES)  # sinfo's suffixes: not responding, powered down, ...
    if result == "unread":
        return Outcome(node, False, f"cannot read its state in Slurm: {message.strip()}")
    if result == "missing":
        return Outcome(node, False, "not a node of the controller's Slurm (sinfo knows none)")
    if result == "failed":
        return Outcome(node, False, f"scontrol update state=drain failed: {message.strip()}")
    if "drain" not in state:
        return Outcome(node, False, f"still {state or 'unknown'} after scontrol update")
    prefix = "already " if result == "already" else ""
    if state == "draining":
        return Outcome(node, True, f"{prefix}draining in Slurm: its running jobs finish first")
    return Outcome(node, True, f"{prefix}{state} in Slurm")


def drain(run: Runner, nodes: Sequence[str], reason: str) -> list[Outcome]:
    """Each node drained (or already), or why not; every node failed where the controller
    could not be reached or the script did not finish."""
    try:
        done = run(SCRIPT, (reason, *nodes), TIMEOUT_S)
    except RemoteError as exc:
        return [Outcome(n, False, f"drain through Slurm on {run.where}: {exc}") for n in nodes]
    seen: dict[str, Outcome] = {}
    for line in done.stdout.splitlines():
        parts = line.split("|", 3)
        if len(parts) == 4 and parts[0] in nodes:
            seen[parts[0]] = _outcome(*parts)
    why = done.why() if done.rc else "no answer for this node"
    return [seen.get(n) or Outcome(n, False, f"drain through Slurm: {why}") for n in nodes]


def node_states(run: Runner) -> dict[str, str]:
    """Every node's state as sinfo says it (`drained`, `draining`, `idle`, `down*`, ...);
    RemoteError naming why when sinfo fails."""
    return {n: state for n, (state, _) in node_reasons(run).items()}


def node_reasons(run: Runner) -> dict[str, tuple[str, str]]:
    """Every node's (state, reason) as sinfo says them (reason 'none' where none is set);
    RemoteError naming why when sinfo fails."""
    done = run(NODE_REASONS, (), TIMEOUT_S)
    if done.rc != 0:
        raise RemoteError(f"sinfo failed on {run.where}: {done.why()}")
    out: dict[str, tuple[str, str]] = {}
    for line in done.stdout.splitlines():
        name, sep, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if sep:
            out.setdefault(name.strip(), (state.strip(), reason.strip()))
    return out
