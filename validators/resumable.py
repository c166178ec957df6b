"""A training job that resumes: the smoke job's model and training loop, checkpointed every
`--checkpoint-every` steps and whenever it is asked (SIGUSR1: now; SIGTERM: now, then stop), and
resumed at start from the newest checkpoint every node holds. One process per GPU (or CPU slot),
started by srun or torchrun:

    srun --ntasks-per-node=1 python -m validators.resumable --steps 400 --checkpoint-every 20

Under srun the ranks are Slurm's tasks and the rendezvous is the step's first node
(validators/slurm_env.py). Checkpoints go to `--checkpoint-dir`, by default
`$RACKFORM_CHECKPOINT_DIR` (the Slurm prolog's per-job directory, kept when the job is requeued):
each node writes a whole copy to its own directory with its own ranks, as the smoke job's
round trip does, so a node-local array is enough (see validators/resume.py for the layout).
A resumed run sees the batches and learning rates an uninterrupted one would have, so its
losses continue where the last checkpoint left them.

The report (each node's first rank writes it, `--report`, by default `report.json` in the
checkpoint directory) says which step the run resumed from and from which checkpoint (written
when and why), every run and checkpoint so far, the Slurm job, and, at the end, the loss drop
over the whole training, that every step ran and that the replicas agree. Exit 0 when the job
finished and no check failed, 1 when a check failed, 143 (128 + SIGTERM) when it stopped on
SIGTERM with its checkpoint written. A signal that comes while Python is still importing torch
is caught too: the flags are set before torch is imported, and the job acts on them at its first step."""

from __future__ import annotations

import sys

from validators.resume import Signals


def main(argv: list[str] | None = None) -> int:
    # Caught from the first moment: importing torch takes seconds, a minute on a slow node, and
    # a spot notice or a preemption may come meanwhile (SIGUSR1's default would kill the job).
    signals = Signals().install()
    from validators.resumable_train import run

    return run(signals, argv)


if __name__ == "__main__":
    sys.exit(main())
