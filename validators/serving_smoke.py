"""The serving smoke job: can this node serve the model it was sized for, at the load and
latency the blueprint states? One process, one device (the first GPU, or the CPU):

    python -m validators.serving_smoke --report /tmp/serving.json --concurrency 16 \\
        --prompt-tokens 512 --output-tokens 128 --ttft-p99-ms 2000 --itl-p99-ms 100 \\
        --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 --dtype-bytes 2 \\
        --model-path /mnt/models/llama --gpu-model H100-SXM --hbm-tbps 3.35 \\
        --expected-peak-bytes 20000000000 --price-usd-hr 98.32

It loads the decoder from the model mount (validators/serving_model.py: the Llama layout in
safetensors, never through a link), or, with no --model-path, writes a small random one of the
same layout to node-local scratch and loads that (an empty cluster is still proven to load and
generate; the blueprint's objectives are then not judged). It runs `--requests` requests,
`--concurrency` at a time, batched with a KV cache (validators/serving_load.py), or, with
`--endpoint URL`, drives a serving engine's OpenAI-compatible endpoint with the same load
(validators/serving_endpoint.py), and judges both alike (validators/serving_checks.py): TTFT and
inter-token latency at p50 and p99 against the objectives, prefill and decode tokens/s, MBU
against the GPU's HBM bandwidth, the weights and KV cache against preflight's estimate, and the
cost per million output tokens at the node's price.

Bounded in time: `--deadline-s` for the whole job. A phase that passes it ends with a failed
`deadline` check naming the phase, and the report is written; a job stuck where it cannot notice
(a kernel, a read) is stopped by a backstop at the deadline plus a grace, which writes the same
report and exits 3. Exit 0 when no check failed, 1 when one did, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import time
from dataclasses import dataclass

import torch

from validators import report, serving_checks, serving_endpoint, serving_model
from validators.report import Check, failed, not_run
from validators.safetensors_io import ModelError
from validators.serving_checks import Expect
from validators.serving_job import Deadline, DeadlinePassed, Job
from validators.serving_load import Load, Request, decode_bytes_per_step, figures

GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DTYPES = {1: None, 2: torch.bfloat16, 4: torch.float32}


def _positive(kind):
    def conv(text: str):
        v = kind(text)
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return v

    return conv


def build() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="validators.serving_smoke", description=__doc__)
    a = p.add_argument
    a("--report", help="Write the JSON report here (whole, never through a link).")
    a("--no-table", action="store_true", help="Print no table.")
    a("--device", choices=("auto", "cpu", "cuda"), default="auto")
    g = p.add_argument_group("the load and its objectives (the blueprint's serving workload)")
    # An objective left out is not declared: its figure is reported, not judged.
    for flag, kind, req in (
        ("--concurrency", int, True),
        ("--prompt-tokens", int, True),
        ("--output-tokens", int, True),
        ("--ttft-p99-ms", float, False),
        ("--itl-p99-ms", float, False),
    ):
        g.add_argument(flag, type=_positive(kind), required=req)
    g.add_argument("--requests", type=_positive(int), help="In all (default: 2 x concurrency).")
    g = p.add_argument_group("the model preflight sized for")
    for flag in ("--layers", "--hidden", "--heads", "--kv-heads", "--head-dim"):
        g.add_argument(flag, type=_positive(int), required=True)
    g.add_argument("--dtype-bytes", type=int, choices=(1, 2, 4), required=True)
    g.add_argument("--model-path", help="The model's directory on the mount (absent: a stand-in).")
    g.add_argument(
        "--expected-peak-bytes", type=_positive(int), help="Preflight's weights + KV estimate."
    )
    g = p.add_argument_group("the GPU and the node (the catalog's figures, rackform's thresholds)")
    g.add_argument("--gpu-model", help="Catalog key, e.g. H100-SXM.")
    g.add_argument("--hbm-tbps", type=_positive(float), help="HBM bandwidth per GPU, TB/s.")
    g.add_argument("--mbu-min", type=_positive(float), help="Calibrated MBU floor, percent.")
    g.add_argument("--price-usd-hr", type=_positive(float), help="The node's price per hour.")
    g.add_argument("--replicas-per-node", type=_positive(int), default=1)
    g.add_argument(
        "--tensor-parallel", type=_positive(int), default=1, help="GPUs one replica spans."
    )
    g = p.add_argument_group("a serving engine instead of the model in process")
    g.add_argument("--endpoint", metavar="URL", help="OpenAI-compatible base URL.")
    g.add_argument("--served-model", help="The model name to ask for (default: the first listed).")
    g.add_argument("--api-key-env", help="Environment variable holding the endpoint's key.")
    g = p.add_argument_group("time and scratch")
    g.add_argument("--deadline-s", type=_positive(float), default=600.0)
    g.add_argument(
        "--stall-s", type=_positive(float), default=60.0, help="A request silent this long fails."
    )
    g.add_argument("--scratch", default="/tmp", help="Where a stand-in model is written.")
    g.add_argument("--standin", choices=sorted(serving_model.STANDINS), help="(auto by device)")
    g.add_argument("--seed", type=int, default=0)
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = build()
    args = p.parse_args(argv)
    if args.heads % args.kv_heads:
        p.error(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    if args.gpu_model is not None and not GPU_MODEL.match(args.gpu_model):
        p.error(f"--gpu-model {args.gpu_model!r}: letters, digits, '.', '_' and '-' only")
    if args.endpoint:
        try:
            args.endpoint = serving_endpoint.base_url(args.endpoint)
        except ValueError as exc:
            p.error(str(exc))
    for name in ("model_path", "scratch"):
        v = getattr(args, name)
        if v is not None and (not v.startswith("/") or "\0" in v or "/../" in f"{v}/"):
            p.error(f"--{name.replace('_', '-')} {v!r}: give an absolute path without '..'")
    if args.output_tokens < 2:
        p.error("--output-tokens must be at least 2 (inter-token latency needs two tokens)")
    if args.requests is None:
        args.requests = 2 * args.concurrency
    return args


def expect_of(args) -> Expect:
    return Expect(
        ttft_p99_ms=args.ttft_p99_ms,
        itl_p99_ms=args.itl_p99_ms,
        shape={
            "layers": args.layers,
            "hidden": args.hidden,
            "heads": args.heads,
            "kv_heads": args.kv_heads,
            "head_dim": args.head_dim,
        },
        dtype_bytes=args.dtype_bytes,
        gpu_model=args.gpu_model,
        hbm_tbps=args.hbm_tbps,
        mbu_min_pct=args.mbu_min,
        expected_peak_bytes=args.expected_peak_bytes,
        price_usd_hr=args.price_usd_hr,
        replicas_per_node=args.replicas_per_node,
        tensor_parallel=args.tensor_parallel,
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_local(
    decoder: serving_model.Decoder, load: Load, device, deadline: Deadline, seed: int, clock
) -> list[Request]:
    """`rounds` batches of `concurrency` requests (the last may be smaller), each a prefill of
    the whole batch then one decode step per output token; every token is on the host when it
    is timed, as a server must have it to stream it. One short untimed batch first (the
    allocator, cuBLAS's first call)."""
    g = torch.Generator().manual_seed(seed)
    vocab, c = decoder.shape.vocab, load.concurrency
    length = load.prompt_tokens + load.output_tokens
    cache = decoder.new_cache(c, length)
    warm = torch.randint(0, vocab, (c, load.prompt_tokens), generator=g).to(device)
    decoder.step(decoder.step(warm, cache, 0)[:, None], cache, load.prompt_tokens).tolist()
    records: list[Request] = []
    for r in range(load.rounds):
        n = min(c, load.requests - r * c)
        kv = cache[:, :, :n]
        prompts = torch.randint(0, vocab, (n, load.prompt_tokens), generator=g).to(device)
        _sync(device)
        batch = [Request(sent=clock()) for _request in range(n)]
        records += batch
        tok = decoder.step(prompts, kv, 0)
        for i in range(load.output_tokens):
            tok.tolist()  # on the host: what a server streams
            now = clock()
            for req in batch:
                req.token_times.append(now)
                req.tokens += 1
            if i + 1 == load.output_tokens:
                break
            deadline.check(f"decoding (batch {r + 1} of {load.rounds})")
            tok = decoder.step(tok[:, None], kv, load.prompt_tokens + i)
    return records


def _load_model(args, job: Job, device, dtype, deadline: Deadline):
    """The model loaded (from the mount, or a stand-in written first) and its checks."""
    standin = None
    path = args.model_path
    if path is None:
        name = args.standin or ("small" if device.type == "cuda" else "tiny")
        deadline.check("writing a stand-in model")
        path = standin = serving_model.write_standin(
            args.scratch, serving_model.STANDINS[name], dtype, args.seed, device
        )
        job.facts["standin"] = {"preset": name, "path": path}
    try:
        deadline.check("loading the model")
        fd = serving_model.open_model(path)
        try:
            loaded = serving_model.load_dir(fd, path, device, dtype)
        finally:
            os.close(fd)
    finally:
        if standin:
            serving_model.remove_standin(standin)
    gbps = loaded.file_bytes / loaded.load_s / 1e9 if loaded.load_s > 0 else None
    job.metrics["model"] = {
        **loaded.shape.as_dict(),
        "weight_bytes": loaded.decoder.weight_bytes,
        "files": list(loaded.files),
        "load_s": round(loaded.load_s, 4),
        "load_gbps": gbps,
    }
    job.add(
        Check(
            "model_load",
            report.PASS,
            loaded.decoder.weight_bytes,
            None,
            "bytes",
            "",
            f"{len(loaded.files)} file(s) in {loaded.load_s:.3g} s from {path}",
        )
    )
    return loaded, standin is not None


def _shape_dict(shape: serving_model.Shape) -> dict:
    return {
        "layers": shape.layers,
        "hidden": shape.hidden,
        "heads": shape.heads,
        "kv_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
    }


@dataclass
class Served:
    """What one way of serving gives the judge."""

    records: list[Request]
    weight_bytes: int | None  # the weights a decode step reads (None: not known)
    kv_per_token: int
    standin: bool = False
    held: int | None = None  # weights + KV cache at its fullest (in process only)
    allocator: int | None = None  # a GPU allocator's peak
    why_memory: str = ""  # why the memory is not judged


def drive_endpoint(args, job: Job, expect: Expect, load: Load, deadline: Deadline) -> Served:
    """The load against the engine's endpoint; the model's shape and weight bytes read from
    the mount's config and headers where --model-path names it."""
    client = serving_endpoint.Client(
        args.endpoint, serving_endpoint.api_key(args.api_key_env), min(args.stall_s, 30)
    )
    deadline.check("asking the endpoint for its model")
    model = args.served_model or client.served_model()
    job.add(Check("model_load", report.PASS, model, model, "", "", f"served by {args.endpoint}"))
    found = weight_bytes = None
    if args.model_path:
        deadline.check("reading the model's config and sizes on the mount")
        found = _shape_dict(serving_model.model_shape(args.model_path))
        weight_bytes = serving_model.weight_bytes_on_disk(args.model_path)
    job.add(serving_checks.shape_check(expect, found, False))
    job.flush()
    deadline.check("driving the endpoint")
    records = serving_endpoint.run(
        client, model, load, args.stall_s, args.seed, deadline.left, clock=time.perf_counter
    )
    kv = 2 * args.layers * args.kv_heads * args.head_dim * args.dtype_bytes
    why = "the engine holds the model: its memory is the engine's to report"
    return Served(records, weight_bytes, kv, why_memory=why)


def serve_in_process(
    args, job: Job, expect: Expect, load: Load, deadline: Deadline, device
) -> Served:
    """The model loaded here (or a stand-in) and generated from at the load."""
    # One-byte weights (FP8) are held in bf16 here: this decoder has no FP8 kernels; the bytes
    # it judges are the blueprint's (--dtype-bytes).
    dtype = DTYPES[args.dtype_bytes] or torch.bfloat16
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    loaded, standin = _load_model(args, job, device, dtype, deadline)
    job.add(serving_checks.shape_check(expect, _shape_dict(loaded.shape), standin))
    job.flush()
    deadline.check("generating")
    records = run_local(loaded.decoder, load, device, deadline, args.seed, time.perf_counter)
    length = load.prompt_tokens + load.output_tokens
    cache_bytes = load.concurrency * length * loaded.shape.kv_bytes_per_token(dtype.itemsize)
    allocator = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    job.metrics["memory"] = {
        "weights_bytes": loaded.decoder.weight_bytes,
        "kv_cache_bytes": cache_bytes,
        "allocator_peak_bytes": allocator,
    }
    why = (
        "a stand-in model: preflight's estimate is for the blueprint's"
        if standin
        else "one-byte (FP8) weights are held in bf16 by this decoder: drive an engine"
        " (--endpoint) to measure an FP8 model"
        if args.dtype_bytes == 1
        else ""
    )
    return Served(
        records,
        # Bytes as the blueprint's dtype holds them.
        round(loaded.decoder.step_read_bytes * args.dtype_bytes / dtype.itemsize),
        loaded.shape.kv_bytes_per_token(args.dtype_bytes),
        standin,
        loaded.decoder.weight_bytes + cache_bytes,
        allocator,
        why,
    )


def phases(args, job: Job, deadline: Deadline, device) -> None:
    expect = expect_of(args)
    load = Load(args.concurrency, args.prompt_tokens, args.output_tokens, args.requests)
    job.metrics["load"] = {
        "concurrency": load.concurrency,
        "prompt_tokens": load.prompt_tokens,
        "output_tokens": load.output_tokens,
        "requests": load.requests,
    }
    if args.endpoint:
        served = drive_endpoint(args, job, expect, load, deadline)
    else:
        served = serve_in_process(args, job, expect, load, deadline, device)
    judge(job, expect, load, served, _endpoint_kind(args) if args.endpoint else device.type)


def judge(job: Job, expect: Expect, load: Load, served: Served, kind: str) -> None:
    """The checks on what was served, alike for both ways."""
    records, standin = served.records, served.standin
    fig = figures(load, records)
    job.metrics["serving"] = fig.as_dict()
    job.add(serving_checks.generation_check(fig, load))
    if standin:
        why = "a stand-in model: the objectives are for the blueprint's"
        job.add(
            not_run("ttft_p99", why, measured=fig.ttft_ms[1], unit="ms"),
            not_run("itl_p99", why, measured=fig.itl_ms[1], unit="ms"),
        )
    else:
        job.add(*serving_checks.latency_checks(fig, expect))
    job.add(*serving_checks.rate_checks(fig, load, expect, standin))
    per_step = (
        decode_bytes_per_step(
            served.weight_bytes, served.kv_per_token, load, expect.tensor_parallel
        )
        if served.weight_bytes is not None
        else None
    )
    mbu, pct = serving_checks.mbu_check(kind, fig, per_step, expect)
    if pct is not None:
        job.metrics["serving"]["mbu_pct"] = pct
    job.add(mbu)
    job.add(serving_checks.memory_check(served.held, served.allocator, expect, served.why_memory))
    cost, usd = serving_checks.cost_check(fig, expect)
    job.metrics["serving"]["usd_per_mtok"] = usd
    job.add(cost)


def _endpoint_kind(args) -> str:
    """An engine's endpoint runs on the node's GPUs where rackform names one (--hbm-tbps)."""
    return "cuda" if args.hbm_tbps else "cpu"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    job = Job(
        args.report,
        {
            "host": socket.gethostname(),
            "device": device.type,
            "torch": torch.__version__,
            "engine": args.endpoint or "in process",
            "gpu_model": args.gpu_model,
            "started": time.time(),
            "deadline_s": args.deadline_s,
        },
    )
    deadline = Deadline(args.deadline_s)

    def stuck(phase: str) -> None:
        job.add(failed("deadline", f"stuck during {phase}; stopped past the deadline"))
        job.flush()

    deadline.backstop(stuck)
    t0 = time.monotonic()
    complete = False
    try:
        phases(args, job, deadline, device)
        complete = True
    except DeadlinePassed as exc:
        job.add(
            failed(
                "deadline",
                f"the {args.deadline_s:g} s deadline passed during {exc}",
                measured=round(time.monotonic() - t0, 1),
                expected=args.deadline_s,
                unit="s",
                op="<=",
            )
        )
    except (ModelError, OSError, serving_endpoint.EndpointError) as exc:
        # Before the model loaded, it is what failed; after, the job, naming the phase.
        why = f"{deadline.phase}: {exc}"
        if any(c.name == "model_load" for c in job.checks):
            job.add(failed("serving_job", why))
        else:
            job.add(failed("model_load", why))
    finally:
        deadline.stop()
    job.facts["duration_s"] = round(time.monotonic() - t0, 3)
    doc = job.flush(complete=complete)
    if not args.no_table:
        print(report.table(doc), flush=True)
    return report.exit_code(doc)


if __name__ == "__main__":
    sys.exit(main())
