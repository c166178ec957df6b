"""The Pulumi program. `stacks/__main__.py` reads the stack config and calls `build`;
`rackform plan` calls the same `build` under Pulumi's mock runtime, so the offline plan and a
real `pulumi up` cannot disagree about what would be created."""

from __future__ import annotations

from pathlib import Path

import pulumi

from rackform.plan.compile import compile_cluster
from rackform.blueprint.loader import Effective
from rackform.stack.cluster import Cluster
from rackform.stack.config import environment_arg, repo_root, resolve_blueprint
from rackform.stack.errors import ProgramError
from rackform.plan.model import ClusterSpec

__all__ = ["ProgramError", "build", "environment_arg", "repo_root", "resolve_blueprint"]


def check_config(spec: ClusterSpec) -> None:
    """The blueprint is the source of truth; a stack whose aws:region says otherwise would
    create the cluster somewhere the blueprint does not say."""
    if spec.target.type != "aws":
        return
    region = pulumi.Config("aws").get("region")
    if region and region != spec.target.region:
        raise ProgramError(
            f"stack config aws:region is {region} but the blueprint says {spec.target.region}",
            path=("target", "region"),
            fix=f"run `pulumi config set aws:region {spec.target.region}` or fix the blueprint",
        )


def build(effective: Effective, root: Path | None = None, **providers) -> Cluster:
    """Create every resource of the cluster and export its outputs. `providers` may replace the
    dynamic providers (host_provider, configure_provider, validate_provider), for tests."""
    root = root or repo_root()
    spec = compile_cluster(effective)
    check_config(spec)
    # lifecycle.protect becomes Pulumi's own protect, which children inherit: even a bare
    # `pulumi destroy` then refuses to delete a protected cluster.
    opts = pulumi.ResourceOptions(protect=True) if spec.lifecycle.protect else None
    cluster = Cluster(spec.stack, spec, roles_dir=root / "roles", opts=opts, **providers)
    pulumi.export("cluster", spec.name)
    pulumi.export("environment", spec.environment)
    pulumi.export("digest", spec.digest)
    pulumi.export("tags", spec.tag_map)
    pulumi.export("nodes", cluster.target.nodes)
    pulumi.export("configured", cluster.configure.content_hash)
    pulumi.export("validation", cluster.validate.report)
    pulumi.export("validation_passed", cluster.validate.passed)
    return cluster
