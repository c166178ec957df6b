"""The smoke job's own speed on this machine, in one run: its checkpoint write against the
storage ceiling of the same directory, and its training throughput (tokens/s, MFU on a GPU).

    .venv/bin/python benchmarks/ckpt_bench.py --dir DIR [--rounds 3] [--state-gb 2]
        [--page-cache] [--steps 30] [--compile] [--peak-tflops T] [--json PATH]

The device is the job's: a GPU when torch sees one, else the CPU. Each round measures the
ceiling with the job's own probe (validators.storage.measure: fio when installed, else one
Python O_DIRECT writer; with fio also the Python one) and then runs the job's checkpoint round
trip (validators.checkpoint.roundtrip: DCP save, page cache dropped, load, bit-for-bit compare)
on a one-rank group, in a fresh directory under DIR, of at least --state-gb of model and AdamW
state on the device. Probe and checkpoint write the same number of bytes and are both timed to
durable on disk (fsync'd); the ratio is taken within each round, because the same disk varies
by 20% or more from one minute to the next. `--page-cache` also times DCP's stock writer
(buffered writes, fsync, torch.save's CRC-32 on): the writer the job used before.

Training: the job's model, preset and step for the device (validators.args defaults: `tiny` on
a CPU, `default` with bf16 on a GPU; DDP on one rank), tokens/s over the timed steps. MFU is
6 x params x tokens/s over the GPU's dense BF16 peak (the catalog's, by device name, or
--peak-tflops); on a CPU it is not measured. Prints figures; asserts nothing. DIR must be on
the disk to measure (not tmpfs); the script removes what it wrote."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ROOT / "rackform/ansible_collections/rackform/gpu/roles/smoke_train/files"
sys.path[:0] = [str(ROOT), str(FILES)]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from validators import checkpoint, storage  # noqa: E402
from validators.args import parse  # noqa: E402
from validators.model import GPT, config, params_for_flops  # noqa: E402
from validators.train import Faults, train  # noqa: E402


def filesystem(path: str) -> tuple[str, str]:
    """(type, source) of the mount holding `path`, from the mount table."""
    best, found = "", ("?", "?")
    real = os.path.realpath(path)
    with open("/proc/self/mounts", encoding="utf-8") as f:
        for line in f:
            src, mnt, fstype = line.split()[:3]
            mnt = mnt.replace("\\040", " ")
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best):
                best, found = mnt, (fstype, src)
    return found


def state_bytes(model: torch.nn.Module) -> int:
    """Model and AdamW state (two moments per parameter), as DCP writes them."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters())


def sized_model(min_gb: float) -> GPT:
    """The smallest GPT of the `small` preset's shape widened to d_model 1024 whose model and
    AdamW state reach `min_gb`, on the meta device (no memory yet)."""
    for layers in range(1, 1000):
        cfg = config("small", d_model=1024, heads=8, layers=layers, seq_len=32, batch=1)
        with torch.device("meta"):
            model = GPT(cfg)
        if state_bytes(model) >= min_gb * 1e9:
            return model
    raise SystemExit(f"--state-gb {min_gb}: no model up to 1000 layers is that large")


def with_state(model: GPT, device: torch.device) -> tuple[GPT, torch.optim.Optimizer]:
    """`model` on `device` with AdamW state from one step (a one-sequence batch)."""
    if next(model.parameters()).is_meta:
        cfg = model.cfg
        torch.manual_seed(0)
        model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x = torch.randint(0, model.cfg.data_vocab, (1, model.cfg.seq_len), device=device)
    model(x, x).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def training(device: torch.device, steps: int, compile_: bool) -> dict:
    """The job's training phase on one rank: tokens/s and the parameters MFU counts."""
    argv = ["--device", device.type, "--steps", str(steps)] + (["--compile"] if compile_ else [])
    args = parse(argv)
    torch.manual_seed(args.seed)
    model = GPT(args.model).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    net = torch.compile(ddp) if args.compile else ddp
    opt = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=0.0, fused=device.type == "cuda"
    )
    warmup = args.warmup if args.warmup is not None else max(1, min(10, args.steps // 5))
    res = train(
        net,
        opt,
        args.model,
        device,
        args.steps,
        warmup,
        args.seed,
        args.lr,
        Faults(),
        lambda _s: None,
        grad_clip=args.grad_clip,
    )
    tps = args.model.batch * args.model.seq_len / res.step_s if res.step_s else None
    return {
        "preset": args.preset,
        "compiled": args.compile,
        "params": params_for_flops(model),
        "timed_steps": res.timed_steps,
        "step_s": res.step_s,
        "tokens_per_s": tps,
        "final_loss": res.losses[-1] if res.losses else None,
        "model": model,
        "opt": opt,
        "checkpoint_threads": args.checkpoint_threads,
    }


def peak_tflops(device: torch.device, given: float | None) -> tuple[float | None, str]:
    """The dense BF16 peak for MFU and where it came from; none on a CPU."""
    if device.type != "cuda":
        return None, "no GPU: MFU is measured against a GPU's dense BF16 peak"
    if given:
        return given, "--peak-tflops"
    name = torch.cuda.get_device_name(device)
    try:
        from rackform.catalog import load_catalog
        from rackform.plan.thresholds import DEVICE_NAMES
    except ImportError as exc:
        return None, f"rackform's catalog cannot be imported ({exc}); pass --peak-tflops"
    for key, pattern in DEVICE_NAMES.items():
        if re.search(pattern, name):
            fig = load_catalog().gpu(key).bf16_dense_tflops
            return fig.value, f"catalog {key} ({fig.source.title}, read {fig.source.date})"
    return None, f"{name!r} matches no catalog GPU; pass --peak-tflops"


def stock_save(state: dict, path: str) -> tuple[int, float]:
    """DCP's stock FileSystemWriter as the job used it before: buffered writes, fsync'd,
    torch.save's CRC-32 on. (bytes, seconds)."""
    os.mkdir(path)
    try:
        w = dcp.FileSystemWriter(path, thread_count=1, sync_files=True)
        t0 = time.perf_counter()
        dcp.save(state, storage_writer=w)
        storage.fsync_dir(path)
        took = time.perf_counter() - t0
        return sum(e.stat().st_size for e in os.scandir(path)), took
    finally:
        shutil.rmtree(path, ignore_errors=True)


def spread(xs: list[float]) -> str:
    if not xs:
        return "not measured"
    return f"{statistics.median(xs):.2f} (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="a directory on the disk to measure")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--state-gb", type=float, default=2.0, help="least checkpoint size, GB")
    ap.add_argument("--page-cache", action="store_true", help="also time DCP's stock writer")
    ap.add_argument("--steps", type=int, default=30, help="training steps (job default 30)")
    ap.add_argument("--compile", action="store_true", help="torch.compile, as --compile")
    ap.add_argument("--peak-tflops", type=float, help="dense BF16 peak for MFU")
    ap.add_argument("--json", help="also write every figure here")
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        ap.error(f"--dir {args.dir}: not a directory")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    fstype, src = filesystem(args.dir)
    what = torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu"
    print(
        f"rackform smoke-job benchmark: {device.type} ({what}), torch {torch.__version__}, "
        f"{os.cpu_count()} cores, {torch.get_num_threads()} torch threads; "
        f"{args.dir} is {fstype} on {src}"
    )
    if fstype in ("tmpfs", "ramfs"):
        print("  warning: that directory is in memory; the figures are not a disk's")
    dist.init_process_group(
        "cpu:gloo,cuda:nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1
    )
    doc: dict = {"device": device.type, "device_name": what, "torch": torch.__version__}
    try:
        t = training(device, args.steps, args.compile)
        doc["training"] = training_figures(args, t)
        doc.update(checkpoint_figures(args, device, t))
    finally:
        dist.destroy_process_group()
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")


def training_figures(args, t: dict) -> dict:
    device = next(t["model"].parameters()).device
    peak, peak_src = peak_tflops(device, args.peak_tflops)
    tps = t["tokens_per_s"]
    mfu = 100 * 6 * t["params"] * tps / (peak * 1e12) if peak and tps else None
    print(
        f"training: preset {t['preset']}{' compiled' if t['compiled'] else ''}, "
        f"{t['params'] / 1e6:.1f}M params, {t['timed_steps']} timed steps: "
        + (f"{tps:,.0f} tokens/s" if tps else "no timed steps")
    )
    if mfu is not None:
        print(f"MFU: {mfu:.1f}% of {peak:g} TFLOPS ({peak_src})")
    else:
        print(f"MFU: not measured ({peak_src})")
    return {
        "preset": t["preset"],
        "compiled": t["compiled"],
        "params": t["params"],
        "timed_steps": t["timed_steps"],
        "tokens_per_s": tps,
        "mfu_pct": mfu,
        "peak_tflops": peak,
        "peak_source": peak_src,
    }


def checkpoint_figures(args, device: torch.device, t: dict) -> dict:
    model, opt = t["model"], t["opt"]
    if state_bytes(model) < args.state_gb * 1e9:
        model, opt = with_state(sized_model(args.state_gb), device)
    threads = t["checkpoint_threads"]
    n_bytes = state_bytes(model)
    print(
        f"checkpoint: {n_bytes / 1e9:.3f} GB of model and AdamW state on {device.type} "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params), "
        f"{threads} writer thread(s) per rank as the job; {args.rounds} rounds"
    )
    probe_mb = math.ceil(n_bytes / (1 << 20))
    group = dist.new_group(backend="gloo")  # as the job's node group: collectives on gloo
    fio = shutil.which("fio") is not None
    cols = ["ceiling", *(["python probe"] if fio else []), "checkpoint", "ratio"]
    cols += ["ratio(python)"] * fio + ["read GB/s"] + ["stock DCP", "ratio"] * args.page_cache
    print("  GB/s per round: " + " | ".join(cols))
    rows, writer, method, py_method = [], "", "", ""
    for i in range(args.rounds):
        row: dict = {}
        c = storage.measure(args.dir, probe_mb)
        if c.gbps is None:
            raise SystemExit(f"storage probe failed: {c.error}")
        row["ceiling"], method = c.gbps, c.method
        if fio:
            p = storage.measure(args.dir, probe_mb, use_fio=False)
            if p.gbps is None:
                raise SystemExit(f"storage probe failed: {p.error}")
            row["python_probe"], py_method = p.gbps, p.method
        path = os.path.join(args.dir, f"rackform-ckpt-bench-{os.getpid()}-{i}")
        res = checkpoint.roundtrip(model, opt, path, group, True, threads=threads)
        if res.error or res.mismatches:
            raise SystemExit(f"checkpoint round trip failed: {res.error or res.mismatches}")
        row.update(bytes=res.bytes, write=res.write_gbps, read=res.read_gbps)
        row["ratio"] = res.write_gbps / row["ceiling"]
        if fio:
            row["ratio_python"] = res.write_gbps / row["python_probe"]
        writer = res.writer
        if args.page_cache:
            sd = dict(zip(("model", "optim"), get_state_dict(model, opt), strict=True))
            nb, took = stock_save(sd, path + "-stock")
            row["stock"] = nb / took / 1e9
            row["stock_ratio"] = row["stock"] / row["ceiling"]
        rows.append(row)
        keys = ["ceiling", *(["python_probe"] if fio else []), "write", "ratio"]
        keys += ["ratio_python"] * fio + ["read"] + ["stock", "stock_ratio"] * args.page_cache
        print(f"  round {i + 1}: " + " | ".join(f"{row[k]:.2f}" for k in keys), flush=True)
    col = {k: [r[k] for r in rows] for k in rows[0]}
    print(f"ceiling GB/s ({method}): {spread(col['ceiling'])}")
    if fio:
        print(f"ceiling GB/s ({py_method}): {spread(col['python_probe'])}")
    print(f"checkpoint write GB/s ({rows[0]['bytes'] / 1e9:.3f} GB; {writer}): {spread(col['write'])}")  # fmt: skip
    print(f"checkpoint write / ceiling, per round: {spread(col['ratio'])}")
    if fio:
        print(f"checkpoint write / python probe, per round: {spread(col['ratio_python'])}")
    print(f"checkpoint read GB/s (page cache dropped first): {spread(col['read'])}")
    if args.page_cache:
        print(f"stock DCP writer GB/s (page cache, CRC-32 on): {spread(col['stock'])}")
        print(f"stock DCP writer / ceiling, per round: {spread(col['stock_ratio'])}")
    return {
        "checkpoint": {
            "state_bytes": rows[0]["bytes"],
            "writer": writer,
            "threads": threads,
            "ceiling_method": method,
            "directory_fs": filesystem(args.dir),
            "rounds": rows,
        }
    }


if __name__ == "__main__":
    main()
