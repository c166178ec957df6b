"""The machine images the AWS target knows, and what each brings with it.

Two kinds: a plain Ubuntu LTS server image, where the roles install the driver, EFA/NCCL and
DCGM themselves (the default: nothing on the node that rackform did not put there), and the AWS
Deep Learning Base AMI, which ships its own NVIDIA driver, CUDA, EFA, NCCL and DCGM and mounts
the instance-store NVMe drives itself. On the DLAMI the roles adopt what it preinstalled rather
than install a second driver branch over it (`nvidia_driver_adopt_preinstalled`), and its NVMe
mount is either used as the checkpoint array or replaced by rackform's own, as the blueprint
says (`ami.instance_store`).

Sources:
- Ubuntu: Canonical publishes its AMIs from account 099720109477 under names
  `ubuntu/images/<volume type>/ubuntu-<codename>-<version>-amd64-server-<date>` ("Find Ubuntu
  images on AWS", https://documentation.ubuntu.com/aws/aws-how-to/instances/find-ubuntu-images/);
  the volume-type part changed from hvm-ssd to hvm-ssd-gp3 across releases, so the filter
  leaves it open. The default user is `ubuntu`, the root device /dev/sda1.
- DLAMI: "AWS Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)" release notes
  (https://docs.aws.amazon.com/dlami/latest/devguide/aws-deep-learning-x86-base-oss-nvidia-driver-gpu-ami-ubuntu-22-04.html):
  owner `amazon`, user `ubuntu`, NVIDIA driver, CUDA, EFA, NCCL and DCGM preinstalled, and the
  instance store mounted at /opt/dlami/nvme.
- Architecture: Canonical names its arm64 images the same way with `arm64` in place of `amd64`
  (same page); EC2 tells the two apart by the image's `architecture` (x86_64 or arm64,
  DescribeImages filter `architecture`). A Grace-based type (arm64) boots the arm64 image of
  the blueprint's kind. The DLAMI's arm64 variant is not known here yet: a DLAMI blueprint with
  an arm64 node group is refused (docs/operations/limits.md).
"""

from __future__ import annotations

from dataclasses import dataclass

CANONICAL = "099720109477"


@dataclass(frozen=True)
class Image:
    key: str
    owner: str
    name_filter: str
    ssh_user: str
    # The image ships the NVIDIA driver, EFA, NCCL and DCGM: the roles adopt them.
    preinstalled: bool
    # Where the image mounts the instance-store NVMe drives itself ("" = it leaves them alone).
    instance_store_mount: str
    # The name filter of its arm64 build ("" = none known here).
    arm64_name_filter: str = ""

    def name_filter_for(self, arch: str) -> str:
        """The name filter of the build for `arch` (EC2's x86_64 or arm64)."""
        if arch == "x86_64":
            return self.name_filter
        if arch == "arm64" and self.arm64_name_filter:
            return self.arm64_name_filter
        raise ValueError(f"no {arch} build of {self.key} is known")

    def serves(self, arch: str) -> bool:
        return arch == "x86_64" or (arch == "arm64" and bool(self.arm64_name_filter))


IMAGES = {
    i.key: i
    for i in (
        Image(
            "ubuntu-22.04",
            CANONICAL,
            "ubuntu/images/*/ubuntu-jammy-22.04-amd64-server-*",
            "ubuntu",
            False,
            "",
            "ubuntu/images/*/ubuntu-jammy-22.04-arm64-server-*",
        ),
        Image(
            "ubuntu-24.04",
            CANONICAL,
            "ubuntu/images/*/ubuntu-noble-24.04-amd64-server-*",
            "ubuntu",
            False,
            "",
            "ubuntu/images/*/ubuntu-noble-24.04-arm64-server-*",
        ),
        Image(
            "dlami-ubuntu-22.04",
            "amazon",
            "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
            "ubuntu",
            True,
            "/opt/dlami/nvme",
        ),
        Image(
            "dlami-ubuntu-24.04",
            "amazon",
            "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *",
            "ubuntu",
            True,
            "/opt/dlami/nvme",
        ),
    )
}
DEFAULT_IMAGE = "ubuntu-22.04"

# Slurm's controller runs Canonical's Ubuntu 24.04 whatever the nodes run.
CONTROLLER_IMAGE = IMAGES["ubuntu-24.04"]
