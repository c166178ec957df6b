"""The Pulumi program. The Pulumi project's entry point calls `main`: the stack config names the
blueprint and environment, the engine compiles and checks it (an unwaived preflight error stops the
program before any resource is registered), and `build` creates every resource; a stack whose config
says `rackform:tier: data` is the blueprint's data tier (`build_data`). `rackform plan` calls the
same functions under Pulumi's mock runtime, so the offline plan and a real `pulumi up` cannot
disagree about what would be created."""

from __future__ import annotations

from pathlib import Path

import pulumi

from rackform.blueprint.problems import BlueprintError
from rackform.engine import Blocked, for_action, prepare, target, with_capacity
from rackform.evidence.boot_record import BOOT_CHECK
from rackform.evidence.verdict import verdict
from rackform.paths import config_path
from rackform.plan.compile import BOOT_VERDICT, RELEASE, REVALIDATE
from rackform.plan.model import TIER_KEY, Plan
from rackform.stack.cluster import Cluster
from rackform.stack.errors import ProgramError
from rackform.stack.gate import UpRefused, before_up
from rackform.stack.stages import ConfigureProvider, ValidateProvider, ValidationFailed
from rackform.stack.target import StackTarget
from rackform.stage_work import CONFIGURE, ROLLOUT_INPUT, VALIDATE


def stack_setting(key: str) -> str | None:
    """A key of this stack's config, e.g. `aws:region`."""
    namespace, _, name = key.partition(":")
    return pulumi.Config(namespace).get(name)


def build(plan: Plan, runtime: StackTarget, **providers) -> Cluster:
    """Create every resource of the cluster, its nodes by `runtime` (the plan's target's part
    of the stack), and export its outputs. The stages run the work `rackform.stage_work` names;
    `providers` may replace the dynamic providers (host_provider, configure_provider,
    validate_provider), for tests."""
    providers.setdefault("configure_provider", ConfigureProvider(**CONFIGURE))
    providers.setdefault("validate_provider", ValidateProvider(**VALIDATE))
    runtime.check_stack_config(plan, stack_setting)
    # lifecycle.protect becomes Pulumi's own protect, which children inherit: even a bare
    # `pulumi destroy` then refuses to delete a protected cluster.
    opts = pulumi.ResourceOptions(protect=True) if plan.lifecycle.protect else None
    # `rackform up --revalidate` (or `pulumi config set rackform:revalidate <anything new>`)
    # asks for a validation run without any other change.
    revalidate = stack_setting(REVALIDATE) or ""
    # `rackform up`'s last wait for the nodes configured at boot (`waiting.wait_for_boot`).
    boot = stack_setting(BOOT_VERDICT) or ""
    cluster = Cluster(
        plan.stack,
        plan,
        runtime,
        opts=opts,
        revalidate=revalidate,
        boot=boot,
        rollout=ROLLOUT_INPUT(plan),
        **providers,
    )
    pulumi.export("cluster", plan.name)
    pulumi.export("environment", plan.environment)
    pulumi.export("digest", plan.digest)
    pulumi.export("tags", plan.tag_map)
    pulumi.export("nodes", cluster.target.nodes)
    if cluster.slurm_controller is not None:
        pulumi.export("slurm_controller", cluster.slurm_controller)
    access = getattr(cluster.target, "access", None)
    if access is not None:
        # The key and known_hosts the stack's nodes are reached with (AWS: keys the stack made),
        # for the commands after `up` (--private-key, --known-hosts): `pulumi stack output
        # ssh_access --show-secrets`. A secret: encrypted in the state, never printed.
        pulumi.export("ssh_access", pulumi.Output.secret(access))
    pulumi.export("configured", cluster.configure.content_hash)
    pulumi.export("validation", cluster.validate.report)
    pulumi.export("validation_passed", cluster.validate.passed)
    pulumi.export("validation_failure", cluster.validate.failure)
    pulumi.export("evidence", cluster.validate.evidence)  # what `rackform promote` reads
    if plan.validation.strict:
        # Not exported, so the SDK awaits it only after every RPC, the stack's outputs (the
        # report) included, has completed: `up` then fails with the state and the evidence kept.
        pulumi.Output.all(
            cluster.validate.passed, cluster.validate.failure, cluster.validate.report
        ).apply(lambda got: fail_unless_passed(plan, *got))
    return cluster


def build_data(plan: Plan, runtime: StackTarget) -> pulumi.ComponentResource:
    """Create the data tier's own stack (`plan.data_stack`): the file system the stack keeps and
    what it needs kept with it, every resource protected (children inherit it) unless
    `rackform destroy --data` lifted it (`rackform:release`), and its ids exported for the
    cluster's stack to read. Nothing in it depends on the cluster's stack."""
    runtime.check_stack_config(plan, stack_setting)
    released = stack_setting(RELEASE) == "true"
    tier = runtime.data_tier(plan, pulumi.ResourceOptions(protect=not released), stack_setting)
    pulumi.export("cluster", plan.name)
    pulumi.export("environment", plan.environment)
    pulumi.export("digest", plan.digest)
    for key, value in tier.outputs.items():
        pulumi.export(key, value)
    return tier


def fail_unless_passed(
    plan: Plan, passed: bool | None, failure: str | None, report: dict | None = None
) -> None:
    """Fail `up` on a failed validation; not for the wait for the nodes configured at boot
    alone, which `rackform up` reports itself after that wait (the next wait could otherwise
    never be recorded)."""
    if passed is False:
        if isinstance(report, dict):
            rest = [c for c in report.get("checks") or [] if c.get("name") != BOOT_CHECK]
            if len(rest) < len(report.get("checks") or []) and verdict({"checks": rest})[0]:
                return
        raise ValidationFailed(
            f"validation of {plan.stack} failed: {failure}; every resource is kept, the report "
            "is in the stack output `validation`"
        )


def main(project: Path) -> None:
    """The program as `pulumi up` runs it, from the stack config of the project at `project`."""
    config = pulumi.Config("rackform")
    blueprint = config_path(config.require("blueprint"), project)
    try:
        prepared = for_action(blueprint, config.get("environment"), project=project)
        # A bare `pulumi up` is gated as `rackform up` is.
        before_up(prepared.plan, project, prepare)
        runtime = target(prepared.plan.target_type).runtime
        # The capacity the groups launch into, as the cloud says it is now: preflight's
        # capacity rules, which no offline command can run.
        prepared = with_capacity(prepared, runtime.capacity(prepared.plan))
        if config.get("tier") == "data":
            if prepared.plan.data_stack is None:
                raise ProgramError(
                    f"stack config {TIER_KEY} is data, but the blueprint keeps no file system in "
                    "a stack of its own",
                    ("storage", "shared"),
                    "remove the key, or give storage.shared an fsx or efs the stack creates "
                    "and keeps",
                )
            build_data(prepared.plan, runtime)
        else:
            build(prepared.plan, runtime)
    except BlueprintError as exc:
        raise pulumi.RunError("\n".join(map(str, exc.problems))) from None
    except Blocked as exc:
        raise pulumi.RunError(
            "\n".join([*exc.lines, f"{blueprint}: preflight errors: nothing was created"])
        ) from None
    except UpRefused as exc:
        raise pulumi.RunError(str(exc)) from None
    except ProgramError as exc:
        problem = prepared.plan.effective.problem(exc.path, exc.message, exc.fix)
        raise pulumi.RunError(str(problem)) from None
