"""The scheduler's `fairness:` section: Slurm accounts with fairshare shares (and their users),
QOS with priorities and GPU limits, and the priority weights. Declaring it is what turns on
Slurm's accounting (slurmdbd): associations, fairshare and QOS limits live in its database.

`fairness_rules` holds the rules that read the rest of the blueprint (the cluster's GPUs) or
cross the section's lists (a QOS an account names, a name declared twice). Names follow what
`sacctmgr` stores: it lowercases account, QOS and user names, so a blueprint that wrote `ML`
would find `ml` in Slurm; such a name is refused with its lowercase spelling as the fix."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field

from rackform.blueprint.schema.base import Strict, Violation, closest
from rackform.blueprint.schema.names import NEW_USER

# Every association's parent account; an account of that name would be Slurm's own.
ROOT_ACCOUNT = "root"
# The QOS every Slurm database has; a blueprint may declare it to set its priority or limits.
NORMAL_QOS = "normal"
# Account and QOS names: lowercase (sacctmgr lowercases them), a letter first, no separators
# that sacctmgr's `name=a,b` lists or its `where` clauses would split on.
SLURM_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
# POSIX user names as Debian's adduser takes them by default, lowercase as sacctmgr keeps them.
USER_NAME = re.compile(NEW_USER)


class Qos(Strict):
    """A Slurm QOS: a priority and GPU limits that the jobs submitted with it share."""

    name: Annotated[str, Field(description="QOS name (sbatch --qos NAME); lowercase.")]
    priority: Annotated[
        int,
        Field(
            description="QOS priority; a job's priority gains qos_weight times this over the highest QOS priority.",
            ge=0,
            le=1_000_000,
        ),
    ] = 0
    max_gpus: Annotated[
        int | None,
        Field(
            description="GPUs all running jobs of this QOS may hold together (GrpTRES=gres/gpu); none: no limit.",
            ge=1,
        ),
    ] = None
    max_gpus_per_user: Annotated[
        int | None,
        Field(
            description="GPUs one user's running jobs of this QOS may hold (MaxTRESPerUser=gres/gpu); more waits; none: no limit.",
            ge=1,
        ),
    ] = None
    max_gpus_per_account: Annotated[
        int | None,
        Field(
            description="GPUs one account's running jobs of this QOS may hold (MaxTRESPerAccount=gres/gpu); none: no limit.",
            ge=1,
        ),
    ] = None


class Account(Strict):
    """A Slurm account: a fairshare share, the users who submit under it and the QOS they may
    use."""

    name: Annotated[str, Field(description="Account name (sbatch -A NAME); lowercase.")]
    share: Annotated[
        int,
        Field(
            description="Fairshare share (Slurm Fairshare): an account's fair part of the cluster is its share over the sum of all shares.",
            ge=1,
            le=1_000_000,
        ),
    ] = 1
    users: Annotated[
        tuple[str, ...],
        Field(
            description="Users who submit under this account; a user's default account is the first that lists them."
        ),
    ] = ()
    qos: Annotated[
        tuple[str, ...],
        Field(
            description="QOS this account's jobs may use, by name ('normal' is Slurm's own); empty: normal and every declared QOS."
        ),
    ] = ()
    default_qos: Annotated[
        str | None,
        Field(
            description="The QOS of a job that names none; none: the first of qos (normal when qos is empty)."
        ),
    ] = None
    max_gpus: Annotated[
        int | None,
        Field(
            description="GPUs this account's running jobs may hold together (GrpTRES=gres/gpu); none: no limit.",
            ge=1,
        ),
    ] = None

    def allowed_qos(self, declared: list[str]) -> tuple[str, ...]:
        """The QOS this account may use, as Slurm's association lists them."""
        if self.qos:
            return self.qos
        return tuple(dict.fromkeys([NORMAL_QOS, *declared]))

    def default(self, declared: list[str]) -> str:
        return self.default_qos or self.allowed_qos(declared)[0]


class Fairness(Strict):
    """Fairshare between accounts and QOS, kept by Slurm's accounting database."""

    accounts: Annotated[
        tuple[Account, ...],
        Field(description="Accounts jobs are submitted under, with their shares.", min_length=1),
    ]
    qos: Annotated[
        tuple[Qos, ...], Field(description="QOS beyond Slurm's own 'normal' (none needed).")
    ] = ()
    half_life_days: Annotated[
        int,
        Field(
            description="Past usage counts half as much after this many days (PriorityDecayHalfLife).",
            ge=1,
            le=365,
        ),
    ] = 7
    fairshare_weight: Annotated[
        int,
        Field(
            description="PriorityWeightFairshare: how much an account's fairshare factor (0..1) adds to a job's priority.",
            ge=0,
            le=1_000_000,
        ),
    ] = 10000
    qos_weight: Annotated[
        int,
        Field(
            description="PriorityWeightQOS: how much the job's QOS priority (over the highest) adds to a job's priority.",
            ge=0,
            le=1_000_000,
        ),
    ] = 10000


def fairness_rules(bp: Any) -> list[Violation]:
    f = bp.scheduler.fairness
    if f is None:
        return []
    at = ("scheduler", "fairness")
    return _qos(f, at) + _accounts(f, at) + _gpu_limits(bp, f, at)


def _name(value: str, what: str, path: tuple, pattern: re.Pattern = SLURM_NAME) -> list[Violation]:
    if pattern.fullmatch(value):
        return []
    lower = value.lower()
    if lower != value and pattern.fullmatch(lower):
        return [
            Violation(
                path,
                f"{what} {value!r} is not lowercase: sacctmgr stores it as {lower!r}",
                f"write {lower!r}",
            )
        ]
    rule = (
        "a letter first, then lowercase letters, digits, '_' or '-' (up to 63)"
        if pattern is SLURM_NAME
        else "a lowercase letter or '_' first, then lowercase letters, digits, '_' or '-' (up to 32)"
    )
    return [Violation(path, f"{what} {value!r} is not a name Slurm keeps as written", rule)]


def _twice(names: list[str], what: str, at: tuple) -> list[Violation]:
    out, seen = [], set()
    for i, name in enumerate(names):
        if name in seen:
            out.append(
                Violation(
                    (*at, i, "name"),
                    f"{what} {name!r} is declared twice",
                    "rename one or merge them",
                )
            )
        seen.add(name)
    return out


def _qos(f: Fairness, at: tuple) -> list[Violation]:
    at = (*at, "qos")
    out = [v for i, q in enumerate(f.qos) for v in _name(q.name, "QOS", (*at, i, "name"))]
    return out + _twice([q.name for q in f.qos], "QOS", at)


def _accounts(f: Fairness, at: tuple) -> list[Violation]:
    at = (*at, "accounts")
    declared = [q.name for q in f.qos]
    known = [NORMAL_QOS, *declared]
    out: list[Violation] = []
    for i, a in enumerate(f.accounts):
        here = (*at, i)
        named = _name(a.name, "account", (*here, "name"))
        if not named and a.name == ROOT_ACCOUNT:
            named = [
                Violation(
                    (*here, "name"),
                    "'root' is Slurm's own account, the parent of every other",
                    "name the account after the team that submits under it",
                )
            ]
        out += named
        seen: set[str] = set()
        for j, user in enumerate(a.users):
            path = (*here, "users", j)
            out += _name(user, "user", path, USER_NAME)
            if user in seen:
                out.append(
                    Violation(
                        path, f"user {user!r} is listed twice in account {a.name!r}", "list it once"
                    )
                )
            seen.add(user)
        for j, q in enumerate(a.qos):
            if q not in known:
                out.append(
                    Violation(
                        (*here, "qos", j),
                        f"account {a.name!r} names QOS {q!r}, which is not declared",
                        closest(q, known),
                    )
                )
        d = a.default_qos
        if d is not None and d not in known:
            out.append(
                Violation(
                    (*here, "default_qos"),
                    f"account {a.name!r}: default_qos {d!r} is not declared",
                    closest(d, known),
                )
            )
        elif d is not None and d not in a.allowed_qos(declared):
            out.append(
                Violation(
                    (*here, "default_qos"),
                    f"account {a.name!r}: default_qos {d!r} is not one of its qos ({', '.join(a.qos)})",
                    f"add {d!r} to its qos, or pick one of them",
                )
            )
    return out + _twice([a.name for a in f.accounts], "account", at)


def cluster_gpus(bp: Any) -> int | None:
    """Every GPU the node groups declare on their hosts; None where a group does not say, or
    has no hosts listed (an AWS group: its nodes are `count` instances whose GPUs the catalog
    knows, not the blueprint)."""
    total = 0
    for g in bp.node_groups:
        hosts = getattr(g, "hosts", None) or ()
        if not hosts or (g.gpu is not None and g.gpus_per_node is None):
            return None
        total += (g.gpus_per_node or 0) * len(hosts)
    return total


def _gpu_limits(bp: Any, f: Fairness, at: tuple) -> list[Violation]:
    total = cluster_gpus(bp)
    if total is None:
        return []
    limits = [((*at, "qos", i, k), getattr(q, k), f"QOS {q.name!r}")
              for i, q in enumerate(f.qos)
              for k in ("max_gpus", "max_gpus_per_user", "max_gpus_per_account")]  # fmt: skip
    limits += [((*at, "accounts", i, "max_gpus"), a.max_gpus, f"account {a.name!r}")
               for i, a in enumerate(f.accounts)]  # fmt: skip
    return [
        Violation(
            path,
            f"{who}: {path[-1]} {n} is more than the cluster's {total} GPUs (a limit it never reaches)",
            f"at most {total}, or leave it out for no limit",
        )
        for path, n, who in limits
        if n is not None and n > total
    ]
