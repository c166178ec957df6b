"""moto's server on loopback for the CLI tests that wait on AWS (tests/moto_server.py)."""

from moto_server import aws, endpoint, no_aws  # noqa: F401
