"""The node lifecycle's state directory: where reap, heal and rolling changes keep their audit
logs, records, locks and snoozes, one directory for the three.

It is `--state-dir` where a command is given one; else the directory $RACKFORM_ROLLOUT_DIR or
$RACKFORM_REAP_DIR names (either variable names it; where both are set, the first); else
`~/.rackform/lifecycle`.

Releases before it kept reap's files in $RACKFORM_REAP_DIR (else `~/.rackform/reap`) and the
rolling changes' and heal's in $RACKFORM_ROLLOUT_DIR (else `~/.rackform/rollout`). Where no
`--state-dir` is given, a file the state directory does not hold is looked for there, and used
where it is found, read and written in place: a warning reap gave, a stopped rollout, heal's
failures, a snooze and a lock held by a run of the earlier release are all still found, and
nothing is moved behind a user's back. A given `--state-dir` is the only place looked in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT = Path("~/.rackform/lifecycle")
# The variables that name the state directory, in the order they are read.
VARIABLES = ("RACKFORM_ROLLOUT_DIR", "RACKFORM_REAP_DIR")
# Where earlier releases kept each trigger's files: its variable, else its default.
EARLIER = (
    ("RACKFORM_REAP_DIR", Path("~/.rackform/reap")),
    ("RACKFORM_ROLLOUT_DIR", Path("~/.rackform/rollout")),
)
# How a command's --state-dir help names where the directory is without it.
HELP = "default $RACKFORM_ROLLOUT_DIR or $RACKFORM_REAP_DIR, else ~/.rackform/lifecycle"


@dataclass(frozen=True)
class StateDir:
    """`path`: where new files are made; `earlier`: where an earlier release may have left one,
    looked in, in order, for a file `path` does not hold."""

    path: Path
    earlier: tuple[Path, ...] = ()

    def file(self, name: str) -> Path:
        """`name` (a file's path relative to the state directory) where it is: in `path`, else
        in the first earlier place that holds it, else in `path` (where it is then made)."""
        here = self.path / name
        if here.exists():
            return here
        return next((d / name for d in self.earlier if (d / name).exists()), here)

    def __str__(self) -> str:
        return str(self.path)


def state_dir(
    given: Path | StateDir | None = None, environ: Mapping[str, str] | None = None
) -> StateDir:
    """The state directory for `given` (a command's --state-dir, or None)."""
    if isinstance(given, StateDir):
        return given
    if given is not None:
        return StateDir(Path(given).expanduser())
    env = os.environ if environ is None else environ
    named = next((env[v] for v in VARIABLES if env.get(v)), None)
    path = Path(named or DEFAULT).expanduser()
    earlier: list[Path] = []
    for variable, default in EARLIER:
        d = Path(env.get(variable) or default).expanduser()
        if d != path and d not in earlier:
            earlier.append(d)
    return StateDir(path, tuple(earlier))
