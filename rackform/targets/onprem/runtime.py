"""What bare metal and colocation share in the running world: Ansible logs in as the blueprint's
`ssh_user`, each listed host is registered (checked over SSH, its facts recorded), never created
or wiped, and an idle cluster is powered off through its BMCs or drained, never destroyed."""

from __future__ import annotations

from rackform.targets.onprem.reap import OnPremReaper
from rackform.targets.runtime import ReplaceRules, TargetRuntime


class OnPremRuntime(TargetRuntime):
    node_types = ("pulumi-python:dynamic/rackform:Host",)  # a listed host, registered
    init_notes = (
        "The hosts must exist and take SSH from this machine as `target.ssh_user` with a key (or "
        "agent): `up` registers them, runs the roles and then the smoke job."
    )
    after_up = "`rackform configure {{blueprint}} --env {{env}}` reruns the Ansible roles."

    image_built = "here"

    def build_image_here(self, plan, request, log):
        """A disk image, baked on a testbed VM (rackform/targets/onprem/node_image.py)."""
        from rackform.targets.onprem.node_image import build_disk_image

        return build_disk_image(plan, request, log)

    def ssh_user(self, target) -> str:
        return target.ssh_user

    def component(self, name, plan, opts, providers):
        # Pulumi's dynamic providers load only for the program, not for every command.
        from rackform.targets.onprem.cluster import OnPremCluster

        return OnPremCluster(f"{name}-hosts", plan, opts=opts, provider=providers.get("host"))

    def replace_rules(self) -> ReplaceRules:
        """A host's registration is replaced when its identity changes (HostProvider.diff)."""
        from rackform.targets.onprem.hosts import IDENTITY

        source = "rackform/targets/onprem/hosts.py HostProvider.diff"
        return ReplaceRules(
            {"pulumi-python:dynamic/rackform:Host": dict.fromkeys(IDENTITY, source)}
        )

    def reaper(self) -> OnPremReaper:
        return OnPremReaper()

    def bmc(self, plan, node: str):
        """The host's Redfish BMC as the blueprint names it (credentials read now)."""
        from pathlib import Path

        from rackform.targets.onprem.redfish import Redfish

        specs = {h.name: h.bmc for g in plan.effective.blueprint.node_groups for h in g.hosts}
        spec = specs.get(node)
        return None if spec is None else Redfish(spec, Path(plan.source).parent)
