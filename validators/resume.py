"""What lets a training job resume, without torch: the signals that ask it to checkpoint, and
its checkpoint directory.

Signals: SIGUSR1 asks for a checkpoint now (the spot agent sends it on an interruption notice),
SIGTERM for a checkpoint and a clean stop (Slurm sends it when it preempts or requeues the job,
GraceTime or KillWait seconds before SIGKILL). The handlers only raise flags; the job acts on
them at the next step boundary, all ranks at the same step.

The directory (`$RACKFORM_CHECKPOINT_DIR`, which the Slurm prolog makes per job id, kept across
a requeue) holds one subdirectory per checkpoint, `step-<8 digits>` (the number of steps done),
each with the tensors and `progress.json` (the losses so far, every checkpoint and run). A
checkpoint is written as `.step-<n>.tmp` and renamed into place once whole, so a directory named
`step-<n>` is always complete; the newest `keep` are kept."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from dataclasses import dataclass, field

from validators.storage import fsync_dir

PROGRESS = "progress.json"
EXIT_STOPPED = 128 + 15  # stopped on SIGTERM, its checkpoint written
_STEP = re.compile(r"^step-(\d{8})$")


@dataclass
class Signals:
    """Flags raised by SIGTERM (stop) and SIGUSR1 (checkpoint now), with when they came."""

    stop: bool = False
    save: bool = False
    seen: list[str] = field(default_factory=list)

    def install(self) -> Signals:
        signal.signal(signal.SIGTERM, self._on)
        signal.signal(signal.SIGUSR1, self._on)
        return self

    def _on(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        self.seen.append(name)
        if signum == signal.SIGTERM:
            self.stop = True
        self.save = True

    def why(self) -> str:
        """The reason for a checkpoint the signals asked for: the last signal seen."""
        return self.seen[-1] if self.seen else "signal"


class Store:
    """One checkpoint directory, as this node sees it (usually a node-local array)."""

    def __init__(self, root: str, keep: int = 2):
        self.root, self.keep = root, max(1, keep)

    def path(self, step: int) -> str:
        return os.path.join(self.root, f"step-{step:08d}")

    def staging(self, step: int) -> str:
        return os.path.join(self.root, f".step-{step:08d}.tmp")

    def steps(self) -> list[int]:
        """The complete checkpoints here, oldest first (none when the directory is missing)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        found = (_STEP.match(n) for n in names)
        return sorted(
            int(m.group(1))
            for m in found
            if m and os.path.isfile(os.path.join(self.root, m.group(0), PROGRESS))
        )

    def begin(self, step: int) -> str:
        """A fresh staging directory for the checkpoint after `step` steps (one node rank
        calls this; the others write into it once it exists)."""
        tmp = self.staging(step)
        shutil.rmtree(tmp, ignore_errors=True)  # what a stop during an earlier save left
        os.makedirs(tmp)
        return tmp

    def publish(self, step: int, progress: dict) -> str:
        """Write `progress.json` into the staged checkpoint, rename it into place, sync, and
        drop all but the newest `keep` checkpoints. Returns its path."""
        tmp, final = self.staging(step), self.path(step)
        with open(os.path.join(tmp, PROGRESS), "w") as fh:
            json.dump(progress, fh)
            fh.flush()
            os.fsync(fh.fileno())
        shutil.rmtree(final, ignore_errors=True)  # a checkpoint of the same step, superseded
        os.replace(tmp, final)
        fsync_dir(self.root)
        for old in self.steps()[: -self.keep]:
            shutil.rmtree(self.path(old), ignore_errors=True)
        return final

    def progress(self, step: int) -> dict:
        with open(os.path.join(self.path(step), PROGRESS)) as fh:
            return json.load(fh)


def common_step(per_rank: list[list[int]]) -> int:
    """The newest checkpoint every rank can read (each reads its own node's directory): the
    highest step in all of their lists, or 0 (start afresh) when they share none."""
    if not per_rank:
        return 0
    shared = set(per_rank[0]).intersection(*map(set, per_rank[1:]))
    return max(shared, default=0)
