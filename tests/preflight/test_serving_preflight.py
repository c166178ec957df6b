"""Serving on paper: the KV cache from the model's shape (grouped-query attention divides it),
the stated load against each node's memory, the decode step against its HBM bandwidth and the
prefill against its peak, and what the serving smoke job is told. Every expected figure is
worked out by hand in the comments, from the catalog's datasheet figures."""

from __future__ import annotations

import pytest
import yaml
from preflight_bp import aws, found, load

from rackform.blueprint.loader import digest_of, load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.preflight.report import run

# Llama-3-8B's shape (its config.json): 32 layers, hidden 4096, 32 query heads sharing 8 KV
# heads of 128, served in bf16.
LLAMA3_8B = {"layers": 32, "hidden": 4096, "attention_heads": 32, "kv_heads": 8, "head_size": 128}
# Llama-2-70B's: 80 layers, hidden 8192, 64 query heads, 8 KV heads of 128.
LLAMA2_70B = {"layers": 80, "hidden": 8192, "attention_heads": 64, "kv_heads": 8}


def serving_bp(
    gpu: str = "L40S",
    gpus: int = 1,
    params_b: float = 8,
    seq_len: int = 8192,
    model: dict | None = None,
    serving: dict | None = None,
    name: str = "serve-l40s-a",
    group: str = "gpu-serve-1",
) -> dict:
    """A bare-metal serving cluster with hyphenated names, as a held-out blueprint has them."""
    workload = {"model_params_b": params_b, "method": "serve", "seq_len": seq_len}
    workload |= {"model": model} if model else {}
    workload |= {"serving": serving} if serving else {}
    return {
        "name": name,
        "purpose": "inference",
        "owner": "serving@example.com",
        "target": {
            "type": "bare_metal",
            "capex_usd_per_gpu": 8760,
            "amortize_months": 12,
            "power_usd_per_kwh": 0.1,
        },
        "node_groups": [
            {
                "name": group,
                "gpu": gpu,
                "gpus_per_node": gpus,
                "hosts": [{"name": "srv-01", "address": "10.0.0.1"}],
            }
        ],
        "network": {"fabric": "ethernet"},
        "workload": workload,
    }


def test_grouped_query_attention_divides_the_kv_cache(tmp_path):
    # Llama-3-8B, one 8192-token sequence:
    #   old estimate (shape read from 8B: 34 layers x 4428, no GQA):
    #     2 x 34 x 4428 x 2 bytes x 8192 = 4,933,156,864 bytes = 4.93 GB
    #   the real shape without GQA (32 KV heads): 2 x 32 x 32 x 128 x 2 x 8192 = 4.29 GB
    #   with GQA (8 KV heads):                    2 x 32 x 8 x 128 x 2 x 8192  = 1.07 GB
    old = load(tmp_path, serving_bp()).sizing.serving
    assert (old.dims.layers, old.dims.hidden, old.dims.estimated) == (34, 4428, True)
    # The estimate keeps heads of 128: round(4428 / 128) = 35 heads, so 35 x 128 = 4480 a layer.
    assert old.kv_cache_gb == pytest.approx(2 * 34 * 35 * 128 * 2 * 8192 / 1e9)
    assert old.kv_cache_gb == pytest.approx(4.933, rel=0.02)  # the old formula's 4.93 GB
    mha = load(tmp_path, serving_bp(model={**LLAMA3_8B, "kv_heads": 32})).sizing.serving
    assert mha.kv_cache_gb == pytest.approx(4.294967296)
    gqa = load(tmp_path, serving_bp(model=LLAMA3_8B)).sizing.serving
    assert gqa.kv_cache_gb == pytest.approx(1.073741824)
    assert gqa.weights_gb == pytest.approx(16)  # 8B x 2 bytes
    # fp8 halves both the weights and the cache.
    fp8 = load(tmp_path, serving_bp(model={**LLAMA3_8B, "dtype": "fp8"})).sizing.serving
    assert (fp8.weights_gb, fp8.kv_cache_gb) == pytest.approx((8, 0.536870912))


def test_a_load_that_does_not_fit_is_a_located_error_gqa_fits(tmp_path):
    # One L40S: 48 GB less the 10% reserve = 43.2 GB; 16 GB of weights leave 27.2 GB.
    # 64 sequences of 4096 tokens (4000 prompt + 96 output):
    #   MHA (32 KV heads): 2 x 32 x 32 x 128 x 2 x 4096 = 2.147 GB each: 137.4 GB, no fit;
    #     at most floor(27.2 / 2.147) = 12 sequences fit.
    load_ = {"concurrency": 64, "prompt_tokens": 4000, "output_tokens": 96}
    mha = serving_bp(seq_len=4096, model={**LLAMA3_8B, "kv_heads": 32}, serving=load_)
    f = found(tmp_path, mha)["serving-memory-does-not-fit"]
    assert f.level == "error" and f.path == ("workload", "serving", "concurrency")
    assert "137 GB of KV cache for 64 x 4096-token sequences" in f.message
    assert "32 KV heads" in f.message and "43.2 GB" in f.message
    assert "at most 12 sequences" in f.fix
    # Located in the file, at the concurrency the blueprint states.
    path = tmp_path / "mha.yaml"
    path.write_text(yaml.safe_dump(mha, sort_keys=False))
    (hit,) = [lf for lf in run(load(tmp_path, mha, "mha.yaml")).findings if lf.finding.blocks]
    line = path.read_text().splitlines()[hit.line - 1]
    assert "concurrency: 64" in line
    #   GQA (8 KV heads): 0.537 GB a sequence; 48 of them hold 25.8 GB, which fits 27.2 GB.
    gqa = serving_bp(seq_len=4096, model=LLAMA3_8B, serving={**load_, "concurrency": 48})
    assert "serving-memory-does-not-fit" not in found(tmp_path, gqa)
    #   but 64 still hold 34.4 GB: floor(27.2 / 0.537) = 50 fit.
    f = found(tmp_path, serving_bp(seq_len=4096, model=LLAMA3_8B, serving=load_))
    assert "at most 50 sequences" in f["serving-memory-does-not-fit"].fix


def test_a_model_whose_weights_do_not_fit_is_the_weights_error_alone(tmp_path):
    # 70B in bf16 is 140 GB; two L40S hold 86.4 GB.
    out = found(tmp_path, serving_bp(gpus=2, params_b=70, serving={"concurrency": 4}))
    assert out["inference-node-too-small"].level == "error"
    assert "serving-memory-does-not-fit" not in out


def test_inter_token_latency_against_the_hbm_bandwidth_bound(tmp_path):
    # Llama-2-70B on 8 x L40S (0.864 TB/s each: 6.912 TB/s), one sequence of 4000 + 96 tokens:
    #   KV: 2 x 80 x 8 x 128 x 2 x 4096 = 1,342,177,280 bytes; weights 140 GB
    #   a decode step reads 141.342 GB: 141.342e9 / 6.912e12 = 20.449 ms at the least;
    #   its FLOPs, 2 x 70e9, over 8 x 362 TFLOPS take 0.048 ms: bandwidth bound.
    def bp(itl=None, ttft=None):
        s = {"concurrency": 1, "prompt_tokens": 4000, "output_tokens": 96}
        s |= {"itl_p99_ms": itl} if itl else {}
        s |= {"ttft_p99_ms": ttft} if ttft else {}
        return serving_bp(gpus=8, params_b=70, seq_len=4096, model=LLAMA2_70B, serving=s)

    plan = load(tmp_path, bp())
    (d,) = plan.decode
    assert d.bytes_per_step == pytest.approx(141.342177280e9)
    assert d.step_ms == pytest.approx(20.449, abs=1e-3) and d.bound_by == "HBM bandwidth"
    assert d.tokens_per_s == pytest.approx(1000 / 20.449, rel=1e-4)
    f = found(tmp_path, bp(itl=20))["serving-itl-unreachable"]
    assert f.level == "error" and f.path == ("workload", "serving", "itl_p99_ms")
    assert "at least 20.4 ms" in f.message and "6.912 TB/s" in f.message
    assert "serving-itl-unreachable" not in found(tmp_path, bp(itl=21))
    # Prefill: 2 x 70e9 x 4000 = 5.6e14 FLOPs over 2.896 PFLOPS = 193.4 ms at the least.
    assert d.prefill_ms == pytest.approx(193.37, abs=0.01)
    f = found(tmp_path, bp(ttft=150))["serving-ttft-unreachable"]
    assert f.path == ("workload", "serving", "ttft_p99_ms") and "193 ms" in f.message
    assert "serving-ttft-unreachable" not in found(tmp_path, bp(ttft=200))


def test_a_large_batch_is_bound_by_compute(tmp_path):
    # Llama-3-8B on one H100 PCIe (2.0 TB/s, 756 TFLOPS), 1024 sequences of 64 + 64 tokens:
    #   bytes: 16 GB + 1024 x 128 x 131,072 = 33.18 GB: 16.59 ms at 2.0 TB/s;
    #   FLOPs: 2 x 8e9 x 1024 = 16.38 TFLOP: 21.67 ms at 756 TFLOPS: compute bound.
    s = {"concurrency": 1024, "prompt_tokens": 64, "output_tokens": 64}
    plan = load(tmp_path, serving_bp("H100-PCIe", seq_len=128, model=LLAMA3_8B, serving=s))
    (d,) = plan.decode
    assert d.bandwidth_ms == pytest.approx(16.59, abs=0.01)
    assert d.compute_ms == pytest.approx(21.67, abs=0.01) and d.bound_by == "compute"
    assert d.step_ms == d.compute_ms


def test_cost_per_million_output_tokens_on_paper(tmp_path):
    # 1 x L40S bought at $8,760 over 12 months: $730 a month over 730 h = $1.00 an hour, plus
    # 350 W x 1.8 (the server) = 0.63 kW at $0.10/kWh = $0.063: $1.063 per node-hour.
    # Llama-3-8B, 8 sequences of 8192 tokens: 16 GB + 8 x 1.074 GB = 24.59 GB a step;
    # at 0.864 TB/s 28.46 ms, so 8 / 0.028461 = 281.09 tokens/s:
    # $1.063 / (281.1 x 3600) x 1e6 = $1.0505 per million output tokens.
    plan = load(tmp_path, serving_bp(model=LLAMA3_8B, serving={"concurrency": 8}))
    (t,) = plan.cost.tokens
    assert t.group == "gpu-serve-1" and t.usd_per_node_hour == pytest.approx(1.063)
    assert t.tokens_per_s == pytest.approx(281.09, abs=0.01)
    assert t.usd_per_million_output_tokens == pytest.approx(1.0505, abs=1e-4)
    assert plan.cost.as_dict()["tokens"][0]["usd_per_million_output_tokens"] == 1.05
    # Unpriced capacity: no cost per token either.
    bp = serving_bp(model=LLAMA3_8B)
    del bp["target"]["power_usd_per_kwh"]
    assert load(tmp_path, bp).cost.tokens == ()


def test_the_serving_smoke_job_arguments_per_node_group(tmp_path):
    s = {"concurrency": 8, "prompt_tokens": 1000, "output_tokens": 200, "itl_p99_ms": 50}
    plan = load(tmp_path, serving_bp(model={**LLAMA3_8B, "path": "llama-3.1-8b"}, serving=s))
    args = plan.group_vars["rackform_serving_smoke"]["gpu-serve-1"]
    # 16 GB + 8 x 1200 x 131,072 bytes = 17,258,291,200 bytes
    assert dict(args) == {
        "concurrency": 8,
        "prompt_tokens": 1000,
        "output_tokens": 200,
        "ttft_p99_ms": None,
        "itl_p99_ms": 50,
        "layers": 32,
        "hidden": 4096,
        "attention_heads": 32,
        "kv_heads": 8,
        "head_size": 128,
        "dtype_bytes": 2,
        "model_mount": "/mnt/checkpoints",
        "model_path": "/mnt/checkpoints/llama-3.1-8b",
        "node_usd_per_hour": 1.063,
        "expected_peak_memory_bytes": 17_258_291_200,
        "gpu_model": "L40S",
    }
    # Defaults: micro_batch sequences of seq_len, 128 of them output; a training cluster, none.
    plan = load(tmp_path, serving_bp(seq_len=4096))
    args = plan.group_vars["rackform_serving_smoke"]["gpu-serve-1"]
    assert (args["concurrency"], args["prompt_tokens"], args["output_tokens"]) == (1, 3968, 128)
    assert plan.group_vars["rackform_serving_smoke"] == {"gpu-serve-1": args}
    training = aws(workload={"model_params_b": 7, "method": "lora"})
    assert load(tmp_path, training).group_vars["rackform_serving_smoke"] == {}


@pytest.mark.parametrize(
    ("workload", "where", "says"),
    [
        (
            {"model": {**LLAMA3_8B, "kv_heads": 5}},
            "workload.model.kv_heads",
            "5 KV heads do not divide 32 attention heads",
        ),
        (
            {"model": {"layers": 32, "hidden": 4000, "attention_heads": 48}},
            "workload.model.head_size",
            "hidden 4000 is not a multiple of 48",
        ),
        (
            {"serving": {"prompt_tokens": 8000, "output_tokens": 500}},
            "workload.serving.prompt_tokens",
            "8000 prompt + 500 output tokens exceed seq_len 8192",
        ),
        (
            {"serving": {"output_tokens": 9000}},
            "workload.serving.output_tokens",
            "exceed seq_len 8192",
        ),
        # The model's directory reaches the job's command line and a path on the node: no way
        # out of the mount, nothing read as an option.
        *(
            ({"model": {**LLAMA3_8B, "path": bad}}, "workload.model.path", "relative to the mount")
            for bad in ("../etc", "models/../../etc", "/etc/models", "-rf", "a/.hidden", "a b")
        ),
    ],
)
def test_located_schema_errors(tmp_path, workload, where, says):
    bp = serving_bp()
    bp["workload"] |= workload
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(bp, sort_keys=False))
    with pytest.raises(BlueprintError) as exc:
        load_effective(path)
    (p,) = exc.value.problems
    assert p.path == where and says in p.message and p.line is not None


def test_a_serving_load_on_a_training_workload_is_refused(tmp_path):
    bp = aws(workload={"model_params_b": 7, "method": "lora", "serving": {"concurrency": 4}})
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(bp, sort_keys=False))
    with pytest.raises(BlueprintError) as exc:
        load_effective(path)
    assert [p.path for p in exc.value.problems] == ["workload.serving"]


def test_a_workload_without_model_or_serving_keeps_its_digest(tmp_path):
    # Left out, the two sections are not in the digest (an earlier promotion's record still
    # names the blueprint: the recorded digests, tests/blueprint/test_digest_stable.py); with
    # either, the digest moves.
    bp = load(tmp_path, serving_bp()).effective.blueprint
    shaped = load(tmp_path, serving_bp(model=LLAMA3_8B)).digest
    loaded = load(tmp_path, serving_bp(serving={"concurrency": 2})).digest
    assert len({digest_of(bp), shaped, loaded}) == 3
