"""What every AWS command after `up` shares (reap, heal, reaching a host): boto3 clients,
imported where they are used (the deploy extra), the cluster's tag filters, and the errors an
AWS call may raise, each turned into one line."""

from __future__ import annotations

from typing import Any

from rackform.plan.model import Plan


class AwsUnavailable(Exception):
    """boto3 is not installed: rackform cannot read or act on AWS."""


def boto3_client(service: str, region: str):
    try:
        import boto3
    except ImportError:
        raise AwsUnavailable(
            "acting on AWS (reap, heal) needs boto3, from the deploy extra (pip install 'rackform[deploy]')"
        ) from None
    return boto3.client(service, region_name=region)


def aws_errors() -> tuple[type[Exception], ...]:
    """What a read or an action on AWS may raise: credentials, network, API errors. Anything
    else is a bug here and is not turned into a verdict."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return (AwsUnavailable,)
    return (AwsUnavailable, BotoCoreError, ClientError)


def tags_of(resource: dict) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in resource.get("Tags", [])}


def cluster_filters(plan: Plan) -> list[dict[str, Any]]:
    tags = plan.tag_map
    return [
        {"Name": f"tag:{k}", "Values": [tags[k]]}
        for k in ("rackform:cluster", "rackform:environment")
    ]


def one_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
