"""The validators' command lines, built once. `rackform smoke` runs the job and the host checks with
these; the smoke_train role composes the same lines on the nodes (its variables
`_smoke_train_job_argv`, `_smoke_train_host_argv`) from the role variables the plan's inventory
hands it (the expectations, without a node count), and a test renders the role's composition and
holds it equal to these. The role keeps the last step itself because only the play knows it: how
many nodes the run spans, and each node's name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rackform.catalog import Catalog, GpuModel
from rackform.plan.expectations import Threshold
from rackform.plan.thresholds import Expectations

# The serving smoke job's whole-run deadline (rackform's choice): the stand-in model written
# and loaded, a warm-up and two batches at the concurrency take well under a minute on a GPU;
# a model of tens of GB read from its mount at 1-2 GB/s takes minutes.
SERVING_DEADLINE_S = 900


def job_argv(exp: Expectations, *, steps: int, checkpoint_dir: str, nodes: int | None) -> list[str]:
    """`validators.smoke`'s arguments: the run's own (steps, checkpoint directory, the nodes
    it must cover), then the blueprint's expectations and thresholds."""
    out = ["--steps", str(steps), "--checkpoint-dir", checkpoint_dir]
    if nodes is not None:
        out += ["--expect-nodes", str(nodes)]
    return out + exp.threshold_args()


def host_argv(
    exp: Expectations,
    *,
    storage_dir: str,
    probe_mb: int,
    expect_mount: str | None,
    node: str | None = None,
    run: str | None = None,
    peers: Sequence[str] = (),
    imex_members: Sequence[str] = (),
) -> list[str]:
    """`validators.hostcheck`'s arguments: the node, the mount the checkpoint directory must
    be (only where it is the blueprint's array), the storage probe, the expectations, then with
    a shared tier the run's id and every node of the run (each reads the others' files), then
    on a tray of a rack-scale NVLink domain its domain's addresses (IMEX's domain checked)."""
    out = ["--node", node] if node else []
    if expect_mount:
        out += ["--expect-mount", expect_mount]
    out += ["--storage-dir", storage_dir, "--storage-probe-mb", str(probe_mb)]
    out += exp.host_args()
    if exp.shared_mount and run and peers:
        out += ["--shared-run", run, "--shared-peers", ",".join(peers)]
    if imex_members:
        out += ["--imex-members", ",".join(imex_members)]
    return out


def serving_thresholds(gpu: GpuModel | None) -> tuple[Threshold, Threshold]:
    """The GPU's HBM bandwidth (TB/s) and the serving smoke job's MBU floor (percent): the
    catalog's figures with their sources; a floor never measured on this GPU is None (the
    job reports MBU as still to be measured, never passes it on a guess)."""
    if gpu is None:
        none = Threshold(None, "no GPU in this node group")
        return none, none
    hbm = gpu.hbm_tbps
    bw = Threshold(hbm.value, f"catalog {gpu.key} hbm_tbps ({hbm.source.key}, {hbm.source.date})")
    fig = gpu.serving_mbu_pct_min
    if fig is None:
        return bw, Threshold(None, f"{gpu.key}'s serving MBU floor is still to be measured")
    src = f"catalog {gpu.key} serving_mbu_pct_min ({fig.source.key}, {fig.source.date})"
    return bw, Threshold(fig.value, src)


def serving_argv(
    *,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    ttft_p99_ms: float | None,
    itl_p99_ms: float | None,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype_bytes: int,
    gpu: GpuModel | None,
    model_path: str | None = None,
    price_usd_hr: float | None = None,
    expected_peak_bytes: int | None = None,
    endpoint: str | None = None,
    deadline_s: float = SERVING_DEADLINE_S,
) -> list[str]:
    """`validators.serving_smoke`'s arguments: the serving workload and its objectives, the
    model preflight sized for, and the GPU's catalog figures (`serving_thresholds`). The job
    validates every one again on the node."""
    out = [
        "--concurrency", str(concurrency),
        "--prompt-tokens", str(prompt_tokens),
        "--output-tokens", str(output_tokens),
        "--layers", str(layers),
        "--hidden", str(hidden),
        "--heads", str(heads),
        "--kv-heads", str(kv_heads),
        "--head-dim", str(head_dim),
        "--dtype-bytes", str(dtype_bytes),
        "--deadline-s", f"{deadline_s:g}",
    ]  # fmt: skip
    # An objective the blueprint leaves out is not passed: the job reports it, not judged.
    out += ["--ttft-p99-ms", f"{ttft_p99_ms:g}"] if ttft_p99_ms is not None else []
    out += ["--itl-p99-ms", f"{itl_p99_ms:g}"] if itl_p99_ms is not None else []
    out += ["--model-path", model_path] if model_path else []
    out += ["--expected-peak-bytes", str(expected_peak_bytes)] if expected_peak_bytes else []
    out += ["--price-usd-hr", f"{price_usd_hr:g}"] if price_usd_hr else []
    out += ["--endpoint", endpoint] if endpoint else []
    if gpu is not None:
        out += ["--gpu-model", gpu.key]
    hbm, mbu = serving_thresholds(gpu)
    return out + hbm.arg("--hbm-tbps") + mbu.arg("--mbu-min")


def serving_job_argv(entry: Mapping[str, Any], catalog: Catalog) -> list[str]:
    """`serving_argv` for one node group's entry of the plan's `rackform_serving_smoke`
    (rackform/plan/serving_vars.py): what the Validate stage and a joining node's bootstrap run
    the serving smoke job with."""
    gpu = catalog.gpu(entry["gpu_model"]) if entry.get("gpu_model") else None
    return serving_argv(
        concurrency=entry["concurrency"],
        prompt_tokens=entry["prompt_tokens"],
        output_tokens=entry["output_tokens"],
        ttft_p99_ms=entry.get("ttft_p99_ms"),
        itl_p99_ms=entry.get("itl_p99_ms"),
        layers=entry["layers"],
        hidden=entry["hidden"],
        heads=entry["attention_heads"],
        kv_heads=entry["kv_heads"],
        head_dim=entry["head_size"],
        dtype_bytes=entry["dtype_bytes"],
        gpu=gpu,
        model_path=entry.get("model_path"),
        price_usd_hr=entry.get("node_usd_per_hour"),
        expected_peak_bytes=entry.get("expected_peak_memory_bytes"),
    )
