"""The local Slurm's fixtures (tests/slurm_local.py: one cluster per session, shared with the
other directories that use it)."""

from slurm_local import slurm, slurm_cluster  # noqa: F401
