"""moto's server on loopback (tests/moto_server.py), and the local Slurm's fixtures (tests/slurm_local.py: one cluster per session, shared with the
other directories that use it)."""

from moto_server import aws, endpoint, no_aws  # noqa: F401
from slurm_local import slurm, slurm_cluster  # noqa: F401
