"""FSx for Lustre (or EFS, below) as the cluster's shared tier (storage.shared.fsx), in the
nodes' subnet and their security group, whose rule admitting all traffic between its members
covers what Lustre needs: TCP 988 and 1018-1023 from the clients and among the file servers ("File system access
control with Amazon VPC", FSx for Lustre user guide). The datasets' S3 bucket is linked as a
data repository association on PERSISTENT_2 (the deployment type that has them), as the file
system's import path on the others ("Linking your file system to an Amazon S3 bucket").

Kept on `destroy` unless the blueprint says otherwise (`retain`): datasets outlive clusters. A kept
one is created in the data tier's own stack, with the network it sits in, all of it protected, and
`rackform destroy` never destroys that stack: never `retain_on_delete` in a stack that deletes its
subnet (AWS refuses to delete a subnet or a security group while the file system's network
interfaces remain). One that is not kept goes with the cluster's stack, deleted before its
subnet."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from rackform.plan.model import Plan
from rackform.targets.aws.network import Placement
from rackform.targets.aws.tags import aws_tags

# Lustre 2.15, the newest version FSx offers and the one current distributions' clients match
# (FSx for Lustre user guide, "Lustre file system versions").
LUSTRE_VERSION = "2.15"
DATASETS_PATH = "/datasets"


class AwsSharedStorage(pulumi.ComponentResource):
    """The file system (created, or an existing one by id) and its mount facts as outputs."""

    file_system_id: pulumi.Input[str]
    dns_name: pulumi.Input[str]
    mount_name: pulumi.Input[str]

    def __init__(
        self,
        name: str,
        plan: Plan,
        subnet,
        security_group,
        place: Placement | None = None,
        opts=None,
    ):
        super().__init__("rackform:aws:SharedStorage", name, None, opts)
        place = place or Placement()
        if plan.shared.efs is not None:
            self._efs(name, plan, subnet, security_group, place)
            return
        fsx = plan.shared.fsx
        if fsx.file_system_id:
            # Read, never managed: what the nodes mount (its DNS and mount names) comes from
            # the file system itself, and `destroy` leaves it alone.
            fs = aws.fsx.LustreFileSystem.get(
                f"{name}-existing", fsx.file_system_id, opts=pulumi.ResourceOptions(parent=self)
            )
            self._expose(fsx.file_system_id, fs.dns_name, fs.mount_name)
            return
        persistent_2 = fsx.deployment == "PERSISTENT_2"
        fs = aws.fsx.LustreFileSystem(
            name,
            storage_capacity=round(fsx.storage_tib * 1000),  # GiB: 1200, 2400, 4800 ...
            deployment_type=fsx.deployment,
            per_unit_storage_throughput=None if fsx.deployment == "SCRATCH_2" else fsx.per_tib,
            # One subnet (pulumi-aws 7 types subnet_ids as a single id; FSx for Lustre
            # file systems live in one Availability Zone).
            subnet_ids=subnet.id,
            security_group_ids=[security_group.id],
            file_system_type_version=LUSTRE_VERSION,
            import_path=None if persistent_2 else fsx.import_path,
            tags=aws_tags(plan, name),
            opts=place.options(self, name),
        )
        if persistent_2 and fsx.import_path:
            aws.fsx.DataRepositoryAssociation(
                f"{name}-datasets",
                file_system_id=fs.id,
                data_repository_path=fsx.import_path.rstrip("/"),
                file_system_path=DATASETS_PATH,
                batch_import_meta_data_on_create=True,
                s3={
                    "auto_import_policy": {"events": ["NEW", "CHANGED", "DELETED"]},
                    "auto_export_policy": {"events": []},
                },
                tags=aws_tags(plan, f"{name}-datasets"),
                opts=place.options(self, f"{name}-datasets"),
            )
        self._expose(fs.id, fs.dns_name, fs.mount_name)

    def _expose(self, file_system_id, dns_name, mount_name) -> None:
        """What the nodes mount, as attributes (`role_vars`) and as the component's outputs."""
        self.file_system_id, self.dns_name, self.mount_name = file_system_id, dns_name, mount_name
        self.register_outputs(
            {"file_system_id": file_system_id, "dns_name": dns_name, "mount_name": mount_name}
        )

    def _efs(self, name: str, plan: Plan, subnet, security_group, place: Placement) -> None:
        """EFS: the file system, encrypted at rest, and a mount target in the nodes' subnet and
        their security group (whose all-traffic rule between members admits NFS, TCP 2049; EFS
        user guide, "Using VPC security groups"). The nodes mount `DNS:/` (the file system's
        DNS name resolves to the mount target in their Availability Zone). An existing one is
        read by id: it must have a mount target the nodes reach already."""
        efs = plan.shared.efs
        if efs.file_system_id:
            fs = aws.efs.FileSystem.get(
                f"{name}-existing", efs.file_system_id, opts=pulumi.ResourceOptions(parent=self)
            )
        else:
            fs = aws.efs.FileSystem(
                name,
                encrypted=True,
                throughput_mode=efs.throughput_mode,
                tags=aws_tags(plan, name),
                opts=place.options(self, name),
            )
            aws.efs.MountTarget(
                f"{name}-mount",
                file_system_id=fs.id,
                subnet_id=subnet.id,
                security_groups=[security_group.id],
                opts=place.options(self, f"{name}-mount"),
            )
        self._expose(fs.id, fs.dns_name, "/")

    def role_vars(self) -> dict[str, pulumi.Input[str]]:
        return mount_vars(self.dns_name, self.mount_name)


def mount_vars(dns_name, mount_name) -> dict[str, pulumi.Input[str]]:
    """What the shared_storage role mounts, known once the file system exists: its DNS name
    and mount name (`mount -t lustre DNS@tcp:/MOUNTNAME`, FSx for Lustre user guide,
    "Mounting from an Amazon EC2 instance"; EFS: `DNS:/`)."""
    return {"shared_storage_address": dns_name, "shared_storage_export": mount_name}
