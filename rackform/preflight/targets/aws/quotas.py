"""AWS's default quotas over a repository's stacks: every rackform AWS stack makes its own VPC,
Elastic IP and NAT gateway, and an account starts with 5 of each per Region (NAT gateways: per
Availability Zone); the figures and how many one stack uses are data (AWS's catalog,
`quotas.yaml`, each with its source).

Which stacks: every environment (the base blueprint included) of every blueprint in the
directory of the file being checked, which is how a repository keeps them (`blueprints/`):
each is a stack `<name>-<env>` that `up` may create. So `rackform plan` or `validate` of any
one of them, or of several at once, counts the same set, and one `up` warns about the others
before it creates its own. The engine reads them (`repository.siblings`) and the
plan carries them (`plan.siblings`): the rule itself reads nothing from disk.

The defaults are adjustable and per account: an account whose quota is raised, or whose other
stacks live elsewhere, waives the finding with its reason; one that already holds VPCs of its
own has less room than this counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rackform.blueprint.loader import Effective
from rackform.blueprint.targets.aws.catalog.quotas import Quota, load_quotas
from rackform.plan.model import Plan, stack_name
from rackform.preflight.base import Finding, Rule


@dataclass(frozen=True)
class AwsStack:
    """One AWS stack a repository declares: where it is and what it is for."""

    name: str
    region: str
    zone: str
    purpose: str

    def place(self, quota: Quota) -> str:
        return self.zone if quota.scope == "zone" else self.region


def aws_stack(effective: Effective) -> AwsStack | None:
    target = effective.blueprint.target
    if target.type != DefaultQuotas.target:
        return None
    return AwsStack(
        stack_name(effective), target.region, target.availability_zone, effective.blueprint.purpose
    )


def repository_stacks(siblings: Iterable[Effective]) -> tuple[AwsStack, ...]:
    """Every AWS stack among a repository's blueprints (each environment one stack)."""
    return tuple(s for s in map(aws_stack, siblings) if s is not None)


class DefaultQuotas(Rule):
    """The AWS stacks declared beside this blueprint, in its region (or zone), need more of a
    resource than AWS's default quota allows."""

    code = "aws-default-quota"
    target = "aws"

    def check(self, plan: Plan) -> Iterable[Finding]:
        own = AwsStack(plan.stack, plan.target.region, plan.target.availability_zone, plan.purpose)
        directory = plan.directory
        stacks = {s.name: s for s in repository_stacks(plan.siblings)}
        stacks[own.name] = own  # as checked now, whatever the file on disk says
        for quota in load_quotas():
            if not quota.used_by(own.purpose):
                continue
            here = sorted(
                (s for s in stacks.values() if s.place(quota) == own.place(quota)),
                key=lambda s: s.name,
            )
            need = sum(quota.used_by(s.purpose) for s in here)
            default = int(quota.default.value)
            if need <= default:
                continue
            field = "availability_zone" if quota.scope == "zone" else "region"
            yield self.finding(
                ("target", field),
                f"the {len(here)} AWS stacks the blueprints in {directory.name or directory}/ "
                f"declare in {own.place(quota)} ({', '.join(s.name for s in here)}) need {need} "
                f"of AWS's {quota.name}, whose default quota is {default} "
                f"({quota.default.source.url}); `up` of the stack past it fails",
                "raise the account's quota in Service Quotas before `up`, or put some of these "
                f"stacks in another {field.replace('_', ' ')}; where the quota is raised, waive "
                f"{self.code} with the reason",
            )


RULES: tuple[Rule, ...] = (DefaultQuotas(),)
