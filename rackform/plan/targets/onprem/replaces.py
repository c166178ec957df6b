"""Which input changes replace a listed host's registration, as its provider's `diff` decides: a
different address, port or user is a different machine (or login), registered anew."""

from __future__ import annotations

from rackform.plan.targets.replace_rules import ReplaceRules

IDENTITY = ("address", "port", "user")

RULES = ReplaceRules(
    {
        "pulumi-python:dynamic/rackform:Host": dict.fromkeys(
            IDENTITY, "rackform/targets/onprem/hosts.py HostProvider.diff"
        )
    }
)
