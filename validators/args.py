"""Command-line arguments of the smoke job. Expectations and thresholds come in from rackform
(the job never reads a blueprint); `auto` defaults depend on whether the run is on GPUs."""

from __future__ import annotations

import argparse
import os
import tempfile

import torch

from validators.domain_checks import PEER_FRACTION
from validators.domain_layout import DomainMapError, parse_map
from validators.model import PRESETS, config
from validators.tier import FORMS, TierError
from validators.tier import parse as tier_url

FABRICS = ("efa", "infiniband", "roce", "ethernet")

# name: (on CPU, on GPU)
AUTO = {
    "preset": ("tiny", "default"),
    "allreduce_min_mb": (1 / 256, 1.0),  # 4 KiB on CPU, 1 MiB on GPU
    "allreduce_max_mb": (1.0, 4096.0),  # public thresholds need messages >= 256 MB
    "allreduce_iters": (5, 20),
    "checkpoint_threads": (1, 4),
}
_FIELDS = ("d_model", "layers", "heads", "seq_len", "batch", "vocab")
LR = {"tiny": 3e-3, "small": 1e-3, "default": 6e-4}


def add_training(p: argparse.ArgumentParser) -> None:
    """The model and training options, shared by every job that trains the model."""
    g = p.add_argument_group("model and training")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    g.add_argument(
        "--preset", choices=PRESETS, help="Model size (default: tiny on CPU, default on GPU)."
    )
    for name in ("d-model", "layers", "heads", "seq-len", "batch", "vocab"):
        g.add_argument(f"--{name}", type=int, help="Override the preset's field.")
    g.add_argument("--steps", type=int, default=30)
    g.add_argument("--warmup", type=int, help="Untimed first steps (default: steps/5, 1..10).")
    g.add_argument("--lr", type=float, help="Peak learning rate (default per preset).")
    g.add_argument(
        "--grad-clip", type=float, default=1.0, help="Clip the gradient norm to this (0: off)."
    )
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--compile", action="store_true", help="torch.compile the model.")


def add_mfu(g) -> None:
    """The MFU figures rackform hands every job that trains on GPUs (the GPU model's catalog
    peak and floor, `rackform/plan/expectations.py`); without a peak, MFU is not run."""
    g.add_argument("--peak-tflops", type=float, help="Dense BF16 peak per GPU, for MFU.")
    g.add_argument("--mfu-min", type=float, help="MFU floor, percent.")


def on_gpu(args: argparse.Namespace) -> bool:
    return args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())


def resolve_training(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fill in what `add_training`'s options leave to the device: the preset (tiny on CPU,
    default on GPU), its learning rate, and `args.model` (the GPTConfig); a bad shape or step
    count is an argparse error."""
    if args.preset is None:
        args.preset = AUTO["preset"][on_gpu(args)]
    if args.lr is None:
        args.lr = LR[args.preset]
    try:
        args.model = config(args.preset, **{k: getattr(args, k) for k in _FIELDS})
    except ValueError as exc:
        p.error(str(exc))
    if args.steps < 2:
        p.error("--steps must be at least 2 (the loss is compared between start and end)")


def build() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="validators.smoke", description=__doc__)
    a = p.add_argument
    a("--report", help="Write the JSON report here (rank 0).")
    a(
        "--no-table",
        action="store_true",
        help="Do not print the table (the launcher prints its own).",
    )
    a(
        "--verdict-in-report",
        action="store_true",
        help="Every rank that reaches the end exits 0, whatever the checks found: the verdict "
        "is the report's, and torchrun's exit status says only whether every rank got there "
        "(validators.launch passes this).",
    )
    add_training(p)
    g = p.add_argument_group("measurements")
    g.add_argument("--allreduce-min-mb", type=float)
    g.add_argument("--allreduce-max-mb", type=float)
    g.add_argument("--allreduce-iters", type=int)
    g.add_argument(
        "--checkpoint-dir",
        default=tempfile.gettempdir(),
        help="A fresh subdirectory is made here, and removed after.",
    )
    g.add_argument("--checkpoint-threads", type=int, help="Writer threads per rank.")
    g.add_argument("--keep-checkpoint", action="store_true")
    g.add_argument(
        "--object-tier",
        metavar="URL",
        help=f"Each node also copies its checkpoint to <URL>/<hostname> ({FORMS}), in the"
        " background while it reads it back, and the job reports checkpoint_tier.",
    )
    g.add_argument(
        "--tier-wait-s",
        type=float,
        default=120.0,
        help="How long each node waits for its copy to the tier (--object-tier).",
    )
    g.add_argument(
        "--tier-endpoint",
        metavar="URL",
        help="An S3-compatible store's endpoint (MinIO, Ceph's RGW): boto3's AWS_ENDPOINT_URL_S3.",
    )
    g = p.add_argument_group("expectations (from the blueprint)")
    g.add_argument("--expect-nodes", type=int)
    g.add_argument("--expect-gpus", type=int, help="GPUs per node.")
    g.add_argument("--expect-gpu-model", help="Catalog key, e.g. H100-SXM.")
    g.add_argument("--expect-gpu-pattern", help="Regex the device name must match.")
    g.add_argument("--expect-nccl", help="Lowest acceptable NCCL version, e.g. 2.21.5.")
    g.add_argument("--expect-fabric", choices=FABRICS)
    add_mfu(g)
    g.add_argument("--busbw-min", type=float, help="All-reduce bus bandwidth floor, GB/s.")
    g.add_argument("--checkpoint-write-min", type=float, help="Checkpoint write floor, GB/s.")
    g.add_argument("--loss-drop", type=float, default=0.2, help="Loss must fall by this fraction.")
    g = p.add_argument_group("NVLink domains (from the plan's topology)")
    g.add_argument(
        "--nvlink-domain",
        action="append",
        default=[],
        metavar="NAME=HOST[,HOST...]",
        help="One NVLink domain and its nodes (repeat per domain): the job measures all-reduce "
        "and all-to-all within each domain and across them, and the links between them.",
    )
    g.add_argument("--domain-allreduce-min", type=float, help="A full domain's busbw, GB/s.")
    g.add_argument("--domain-alltoall-min", type=float, help="A full domain's all-to-all, GB/s.")
    g.add_argument(
        "--domain-peer-fraction",
        type=float,
        default=PEER_FRACTION,
        help="A domain or link below this fraction of its peers' median fails.",
    )
    g = p.add_argument_group("time limits (the job never hangs)")
    g.add_argument(
        "--collective-timeout-s",
        type=float,
        default=120.0,
        help="A collective that does not complete in this time fails.",
    )
    g.add_argument(
        "--watchdog-s",
        type=float,
        default=300.0,
        help="A rank with no progress for this long aborts (0: off).",
    )
    g.add_argument(
        "--heartbeat-file",
        default=os.environ.get("RACKFORM_HEARTBEAT_FILE"),
        help="node_exporter textfile (.prom) the node's first rank rewrites with the time of "
        "the last completed step, for rackform reap (default $RACKFORM_HEARTBEAT_FILE; unset: "
        "none).",
    )
    g = p.add_argument_group(
        "fault injection (TEST-ONLY: these break the run on purpose, to prove it fails cleanly)"
    )
    g.add_argument("--fault-step", type=int, default=2, help="Training step the faults act at.")
    g.add_argument("--fault-kill-rank", type=int, help="This rank SIGKILLs itself.")
    g.add_argument("--fault-stall-rank", type=int, help="This rank stops making progress.")
    g.add_argument(
        "--fault-kill-at-end",
        type=int,
        metavar="RANK",
        help="This rank SIGKILLs itself after the last phase, before the job's end.",
    )
    g.add_argument("--fault-nan-lr", action="store_true", help="The learning rate becomes NaN.")
    g.add_argument(
        "--fault-ckpt-fsize",
        type=int,
        metavar="BYTES",
        help="Cap file size (RLIMIT_FSIZE) during the checkpoint: a real EFBIG, as from a full disk.",
    )
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = build()
    args = p.parse_args(argv)
    gpu = on_gpu(args)
    for name, (cpu, gpu_value) in AUTO.items():
        if getattr(args, name) is None:
            setattr(args, name, gpu_value if gpu else cpu)
    resolve_training(p, args)
    if not 0 < args.loss_drop < 1:
        p.error("--loss-drop must be between 0 and 1")
    if args.allreduce_min_mb > args.allreduce_max_mb:
        p.error("--allreduce-min-mb exceeds --allreduce-max-mb")
    try:
        parse_map(args.nvlink_domain)
    except DomainMapError as e:
        p.error(str(e))
    if not 0 < args.domain_peer_fraction <= 1:
        p.error("--domain-peer-fraction must be in (0, 1]")
    if args.object_tier is not None:
        try:
            tier_url(args.object_tier)
        except TierError as e:
            p.error(f"--object-tier: {e}")
    if args.tier_wait_s < 0:
        p.error("--tier-wait-s must not be negative")
    if args.tier_endpoint:
        # boto3 reads the endpoint of its S3 client from here (botocore's service-specific
        # endpoint variable), as the resumable job's comes from the Slurm prolog.
        os.environ["AWS_ENDPOINT_URL_S3"] = args.tier_endpoint
    return args
