"""A node with GPUs gets NVML's Python binding in the smoke job's virtualenv: the host checks read
the GPUs through it (count, ECC, row remaps, NVLink, PCIe) and fail where GPUs are expected and
it is missing. The role's own expressions, rendered as Ansible renders them (tests/role_vars.py):
the GPUs the node's host checks expect, else those the driver role found; a node without GPUs
(the VM testbed's) installs nothing more."""

from __future__ import annotations

import pytest
import yaml
from gpu_collection import ROLES_DIR
from role_vars import render


@pytest.mark.parametrize(
    ("host_args", "found", "gpus"),
    [
        (["--dcgm-level", "1", "--expect-gpus", "8", "--expect-nvlinks", "18"], None, 8),
        (["--dcgm-level", "1", "--expect-gpus", "0"], 2, 0),  # the blueprint's word wins
        ([], 4, 4),  # nothing declared: the driver role's count
        ([], None, 0),
    ],
)
def test_the_gpus_a_node_expects(host_args, found, gpus):
    facts = {} if found is None else {"nvidia_driver_gpu_count": found}
    got = render("smoke_train", "_smoke_train_expect_gpus", {"smoke_train_host_args": host_args},
                 ["n1"], **facts)  # fmt: skip
    assert int(got) == gpus


def pip_names() -> str:
    """The expression the role's pip task installs from."""
    task = next(
        t
        for t in yaml.safe_load((ROLES_DIR / "smoke_train" / "tasks" / "venv.yml").read_text())
        if t.get("name") == "Install torch and the job's other packages into the virtualenv"
    )
    return task["ansible.builtin.pip"]["name"].strip().removeprefix("{{").removesuffix("}}")


def test_the_packages_of_a_node_with_gpus():
    expr = pip_names()

    def packages(host_args):
        return render("smoke_train", expr, {"smoke_train_host_args": host_args}, ["n1"],
                      ansible_check_mode=True)  # fmt: skip

    assert "nvidia-ml-py" in packages(["--expect-gpus", "8"])
    assert "nvidia-ml-py" not in packages(["--expect-gpus", "0"])
    torch = packages([])[0]
    assert torch.startswith("torch==") and packages([]) == [torch, "numpy"]
    assert packages(["--expect-gpus", "8"]) == [torch, "numpy", "nvidia-ml-py"]


@pytest.mark.parametrize(
    ("job_args", "boto3"),
    [
        (["--loss-drop", "0.2", "--object-tier", "s3://dc2-ckpt/train/smoke"], True),
        # The shared tier is a directory: the job copies with the standard library.
        (["--object-tier", "/shared/checkpoints/smoke"], False),
        (["--loss-drop", "0.2"], False),
        # A value that only mentions s3 elsewhere is not a tier.
        (["--tier-endpoint", "s3://x", "--object-tier", "/shared/c"], False),
    ],
)
def test_an_object_tier_brings_boto3(job_args, boto3):
    expr = pip_names()
    got = render("smoke_train", expr, {"smoke_train_job_args": job_args}, ["n1"],
                 ansible_check_mode=True)  # fmt: skip
    assert ("boto3" in got) is boto3, got
