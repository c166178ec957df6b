"""ClusterSpec -> Ansible inventory and role variables. One function each, used by
`rackform compile`, `rackform configure` and the Pulumi configure resource alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rackform.catalog import load_catalog
from rackform.spec import ClusterSpec
from rackform.thresholds import GroupError, for_group

# (name, address, port) of a node that exists; for AWS it comes from stack outputs.
Node = tuple[str, str, int]


def group_name(node_group: str) -> str:
    return "ng_" + node_group.replace("-", "_")


def inventory(
    spec: ClusterSpec, hosts: Mapping[str, Sequence[Node]] | None = None
) -> dict[str, Any]:
    """The YAML inventory: every node in `gpu_nodes`, each node group its own child group.
    `hosts` maps node-group name -> nodes; bare-metal and colocation hosts come from the spec,
    AWS nodes only once the stack has created them (an empty group until then)."""
    user = getattr(spec.target, "ssh_user", "ubuntu")
    children: dict[str, Any] = {}
    for g in spec.node_groups:
        nodes = list((hosts or {}).get(g.name, [])) or [
            (h.name, h.address, h.port) for h in g.hosts
        ]
        by_name = {h.name: h for h in g.hosts}
        entries: dict[str, Any] = {}
        for name, address, port in nodes:
            entry: dict[str, Any] = {"ansible_host": address, "ansible_port": port}
            host = by_name.get(name)
            if host is not None and host.rack:
                entry["rack"] = host.rack
            if host is not None and host.nvme:
                entry["nvme_raid_devices"] = list(host.nvme)
            entries[name] = entry
        children[group_name(g.name)] = {"hosts": entries}
    return {
        "all": {
            "vars": {"ansible_user": user, "ansible_python_interpreter": "/usr/bin/python3"},
            "children": {"gpu_nodes": {"children": children}},
        }
    }


def group_vars(spec: ClusterSpec) -> dict[str, Any]:
    """Role variables for every node, named `<role>_<var>` (see each role's argument_specs)."""
    cat = load_catalog()
    gpus = [cat.gpu(g.gpu) for g in spec.node_groups if g.gpu and g.gpus_per_node]
    net, ckpt, sw = spec.network, spec.checkpoint, spec.software
    return {
        "rackform_cluster": spec.name,
        "rackform_environment": spec.environment,
        "rackform_purpose": spec.purpose,
        "rackform_digest": spec.digest,
        "nvidia_driver_branch": sw.driver_branch,
        "nvidia_driver_cuda_version": sw.cuda,
        "nvidia_driver_require_gpu": bool(gpus),
        "nvidia_driver_fabric_manager": any(g.nvswitch for g in gpus),
        "nccl_rdma_fabric": net.fabric,
        "nccl_rdma_hcas": list(net.hcas),
        "nccl_rdma_interfaces": list(net.interfaces),
        "nccl_rdma_nccl_version": sw.nccl,
        "nccl_rdma_cuda_version": sw.cuda,
        "nvme_raid_level": ckpt.raid_level,
        "nvme_raid_mount": ckpt.mount,
        "nvme_raid_filesystem": ckpt.filesystem,
        "nvme_raid_devices": list(ckpt.devices),
        "nvme_raid_allow_wipe": ckpt.allow_wipe,
        "dcgm_version": sw.dcgm,
        "dcgm_cuda_version": sw.cuda,
        # DCGM watches GPUs: hosts of a CPU-only cluster (the testbed) skip it, saying why.
        "dcgm_require_gpu": bool(gpus),
        "dcgm_diag_level": spec.validation.dcgm_diag_level,
        "smoke_train_steps": spec.validation.smoke_steps,
        "smoke_train_torch_version": sw.torch,
        "smoke_train_checkpoint_dir": ckpt.mount,
        # The job's rendezvous uses the first node's address on the fabric's first interface.
        "smoke_train_interface": net.interfaces[0] if net.interfaces else "",
        **_smoke_expectations(spec),
    }


def _smoke_expectations(spec: ClusterSpec) -> dict[str, Any]:
    """The smoke job's and host checks' expectations (rackform/thresholds.py). The role adds
    --expect-nodes itself from the nodes actually in the run. A cluster of several node groups
    gets none: one job across different groups has no single set of expectations."""
    try:
        exp = for_group(spec, None, nodes=spec.nodes)
    except GroupError:
        return {"smoke_train_job_args": [], "smoke_train_host_args": []}
    job = exp.job_args()
    if "--expect-nodes" in job:
        i = job.index("--expect-nodes")
        del job[i : i + 2]
    return {"smoke_train_job_args": job, "smoke_train_host_args": exp.host_args()}
