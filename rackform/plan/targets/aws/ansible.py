"""How Ansible reaches the AWS target's nodes: through the stack's EC2 Instance Connect
Endpoint, as the machine image's login user; and what the roles adopt of what the image
preinstalled."""

from __future__ import annotations

from collections.abc import Mapping

from rackform.plan.model import Basis


def role_vars(plan: Basis) -> Mapping[str, object]:
    """On an image that preinstalled the driver and mounts the instance store itself (the
    DLAMI), the roles adopt the driver (refusing a second branch) and use or replace its array,
    as the blueprint says. On spot capacity, Slurm's nodes watch for their interruption notice
    (`slurm_spot_agent`)."""
    image = plan.target_plan.image
    out: dict[str, object] = {}
    if plan.scheduler is not None:
        # EC2 reclaims a spot instance with a two-minute notice in the instance metadata
        # (EC2 user guide, "Spot Instance interruption notices"): the agent drains the node
        # and has its job checkpoint and requeue. Off elsewhere, where no notice comes.
        out["slurm_spot_agent"] = any(g.market == "spot" for g in plan.node_groups)
    if image.preinstalled:
        out |= {
            "nvidia_driver_adopt_preinstalled": True,
            "nvme_raid_preexisting_mount": image.instance_store_mount,
            "nvme_raid_preexisting_action": plan.target.ami.instance_store,
        }
    return out


def inventory_vars(plan: Basis) -> Mapping[str, object]:
    """The nodes have no public address and no inbound port from the internet: the
    controller's SSH goes through the stack's EC2 Instance Connect Endpoint, tunnelled by the
    AWS CLI (`aws ec2-instance-connect open-tunnel`, AWS CLI v2; EC2 user guide, "Connect to an
    instance using EC2 Instance Connect Endpoint"). Each node's instance id comes with the
    stack's outputs (`rackform_instance_id`)."""
    return {
        # The image's login user (ubuntu) is not root: the roles act as root through sudo,
        # which Ubuntu's cloud images give cloud-init's default user without a password
        # (/etc/cloud/cloud.cfg, system_info.default_user: sudo ALL=(ALL) NOPASSWD:ALL).
        "ansible_become": True,
        # The instances the stack just launched boot first: the roles wait for their SSH.
        "rackform_wait_for_nodes_s": 600,
        "rackform_ssh_proxy": (
            "aws ec2-instance-connect open-tunnel --region "
            f"{plan.target.region} --instance-id {{{{ rackform_instance_id }}}}"
        ),
    }
