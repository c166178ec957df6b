"""moto's server on loopback for the AWS tests (tests/moto_server.py)."""

from moto_server import aws, endpoint, no_aws  # noqa: F401
