"""What bare metal and colocation share in the running world: each listed host is registered
(checked over SSH, its facts recorded), never created or wiped, a listed host configured at boot
is served its artifact and heard from through the controller's boot server, the node image is a
disk image built here, and an idle cluster is powered off through its BMCs or drained, never
destroyed."""

from __future__ import annotations

from rackform.targets.onprem.reap import OnPremReaper
from rackform.targets.runtime import TargetRuntime


class OnPremRuntime(TargetRuntime):
    image_built = "here"

    def build_image_here(self, plan, request, log):
        """A disk image, baked on a testbed VM."""
        from rackform.targets.onprem.node_image import build_disk_image

        return build_disk_image(plan, request, log)

    def component(self, name, plan, opts, providers):
        # Pulumi's dynamic providers load only for the program, not for every command.
        from rackform.targets.onprem.cluster import OnPremCluster

        return OnPremCluster(f"{name}-hosts", plan, opts=opts, provider=providers.get("host"))

    def check_boot(self, plan, groups, how) -> None:
        """The boot server needs an address to listen on, and one the nodes reach."""
        from rackform.boot.controller import BootError, check_bind

        if not how.bind:
            names = ", ".join(g.name for g in groups)
            raise BootError(
                f"node group(s) {names} configure at boot: `up` serves their artifacts and takes "
                "their reports; say where it listens with --boot-bind ADDR (and --boot-url where "
                "the nodes reach it through another address), or --boot-deadline 0 to not wait"
            )
        check_bind(how.bind, how.url, how.tls)

    def await_boot(self, plan, groups, how):
        """A boot server round for the listed hosts of `groups` (the boot controller's):
        a new key, each node's user data (its own token) for the site's provisioning to hand
        it, the artifacts served and the reports taken until every node reported or the
        deadline."""
        from rackform.boot.controller import announced, default_out, listed_groups, prepare, serve

        listed = [g for g in listed_groups(plan) if g.name in {x.name for x in groups}]
        round_ = prepare(plan, how.out or default_out(plan), listed)

        def listening(bound, written) -> None:
            for line in announced(round_, bound, written, how.deadline_s):
                how.say(line)

        return serve(
            round_,
            how.bind or "",
            how.port,
            how.deadline_s,
            url=how.url,
            tls=how.tls,
            listening=listening,
            poll_s=how.poll_s,
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
