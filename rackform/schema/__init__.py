"""The typed blueprint schema (pydantic v2)."""

from rackform.schema.base import Path, RuleViolations, Violation
from rackform.schema.blueprint import Blueprint
from rackform.schema.sections import Host, NodeGroup
from rackform.schema.target import AwsTarget, BareMetalTarget, ColocationTarget, Rack

__all__ = [
    "AwsTarget",
    "BareMetalTarget",
    "Blueprint",
    "ColocationTarget",
    "Host",
    "NodeGroup",
    "Path",
    "Rack",
    "RuleViolations",
    "Violation",
]
