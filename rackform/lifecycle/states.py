"""A node's states in the lifecycle, each named once, and the one place Slurm's node states and
reasons are read into them.

`Stage` is what a record stores for a batch of nodes (a rolling change's batch, or one node heal
remediates), in the order the batch goes through them; a batch that fails stops at `failed`:

| stage | the batch's nodes |
| --- | --- |
| pending | in service, not reached yet |
| drained | drained in Slurm and holding no job: in maintenance |
| applied | changed (new software, or remediated): being validated |
| validated | passed their validation, about to return |
| done | returned to service |
| failed | left drained with the reason: quarantined until someone acts |
| rolled back | the old software applied again, validated and returned |

`NodeState` is what a node is now, from Slurm's state and reason and its batch's stage
(`node_state`), as `rackform status` shows it:

| state | when |
| --- | --- |
| in service | Slurm runs jobs there (idle, allocated, mixed, ...) |
| draining | drained, a job still running |
| in maintenance | drained by a rollout or heal batch that is under way |
| validating | its batch applied, re-validation under way |
| quarantined | drained by heal for a person, its batch failed, or left drained by a rollout that
  ended (abandoned): stays out until someone acts |
| drained | drained by someone else (the reason says who and why) |
| down | down, failed, not responding |
| unknown | Slurm does not know it |
"""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    PENDING = "pending"
    DRAINED = "drained"
    APPLIED = "applied"
    VALIDATED = "validated"
    DONE = "done"
    FAILED = "failed"
    ROLLED_BACK = "rolled back"


# The stages a batch goes through in order; FAILED and ROLLED_BACK end it elsewhere.
STEPS = (Stage.PENDING, Stage.DRAINED, Stage.APPLIED, Stage.VALIDATED, Stage.DONE)


class NodeState(StrEnum):
    IN_SERVICE = "in service"
    DRAINING = "draining"
    IN_MAINTENANCE = "in maintenance"
    VALIDATING = "validating"
    QUARANTINED = "quarantined"
    DRAINED = "drained"
    DOWN = "down"
    UNKNOWN = "unknown"


# sinfo's states (base state, suffixes stripped) of a node that runs no new job: what the
# out-of-service budget counts, whoever took the node out (heal, a rollout, a person).
OUT = ("drain", "down", "fail", "maint", "reboot", "power", "unknown", "inval", "future")
# sinfo's suffixes on a state: not responding (*), powered down (~), ...
SUFFIXES = "*~#!%$@^-"

# The Slurm reasons rackform writes: a batch under way (`rackform rollout|heal <digest> batch N`)
# and heal's drain for a person (`rackform heal: <evidence>`).
OURS = ("rackform rollout ", "rackform heal ")
TICKET = "rackform heal:"


def batch_reason(trigger: str, digest: str, batch: int) -> str:
    """The Slurm reason a batch is drained with: `rackform rollout 0123456789ab batch 2`."""
    return f"rackform {trigger} {digest.removeprefix('sha256:')[:12]} batch {batch}"


def base(state: str) -> str:
    """sinfo's state without its suffixes, lower case: `drained`, `idle`, `down`."""
    return state.rstrip(SUFFIXES).lower()


def out_of_service(state: str) -> bool:
    s = base(state)
    return s == "drained" or any(word in s for word in OUT)


def node_state(state: str, reason: str, stage: str = "") -> NodeState:
    """A node's state from sinfo's `state` and `reason` (empty where Slurm does not know the
    node) and its batch's stage where a live record holds it ("" where none does)."""
    if not state:
        return NodeState.UNKNOWN
    if not out_of_service(state):
        return NodeState.IN_SERVICE
    if any(w in base(state) for w in ("down", "fail")) or state.endswith("*"):
        return NodeState.DOWN
    if stage == Stage.FAILED or reason.startswith(TICKET):
        return NodeState.QUARANTINED
    if stage == Stage.APPLIED:
        return NodeState.VALIDATING
    if stage not in ("", Stage.DONE):
        return NodeState.IN_MAINTENANCE
    if reason.startswith(OURS):  # left drained by a rollout or heal run that ended
        return NodeState.QUARANTINED
    if base(state) == "draining":
        return NodeState.DRAINING
    return NodeState.DRAINED
