"""storage.object: the checkpoint tier's schema, each mistake one located line (file, line,
field), and what a valid one gives the plan."""

from __future__ import annotations

import pytest
from blueprint_helpers import aws_text, bare_text, located_line, validate_text
from preflight_bp import aws, load


def on_aws(obj: str) -> str:
    return aws_text(f"storage:\n  object:\n{obj}\n")


def on_metal(obj: str) -> str:
    return bare_text(f"storage:\n  object:\n{obj}\n")


@pytest.mark.parametrize(
    ("template", "obj"),
    [
        (on_aws, "    url: s3://team-ckpt/runs/llama-70b"),
        (on_aws, "    url: s3://team.ckpt-01"),
        (on_metal, "    url: s3://ckpt/dc2\n    endpoint_url: https://minio.dc2.lab:9000"),
        (on_metal, "    url: 's3://ckpt/dc2/'\n    endpoint_url: http://10.0.0.9:9000/"),
    ],
)
def test_a_tier_is_valid(tmp_path, template, obj):
    _, r = validate_text(tmp_path, template(obj))
    assert r.returncode in (0, 1), r.stderr  # 1: a preflight warning elsewhere is fine
    assert "storage.object" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("template", "obj", "where", "message"),
    [
        (on_aws, "    url: s3://Team-Ckpt/runs", ":9:", "storage.object.url: 's3://Team-Ckpt/runs' is not s3://BUCKET/PREFIX"),
        (on_aws, "    url: gs://team-ckpt/runs", ":9:", "storage.object.url"),
        (on_aws, "    url: s3://ab", ":9:", "3-63 lowercase"),
        (on_aws, "    url: 's3://team-ckpt/runs with space'", ":9:", "storage.object.url"),
        (on_metal, "    url: s3://ckpt/x\n    endpoint_url: minio:9000", ":15:", "storage.object.endpoint_url"),
        (on_metal, "    url: s3://ckpt\n    bucket: ckpt", ":15:", "storage.object.bucket: unknown field"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_located_line(tmp_path, template, obj, where, message):
    f, r = validate_text(tmp_path, template(obj))
    line = located_line(f, r)
    assert line.startswith(f"{f}{where}") and message in line, line


def test_the_plan_carries_the_tier_and_the_smoke_job_copies_there(tmp_path):
    plan = load(tmp_path, aws(count=2, storage={"object": {"url": "s3://team-ckpt/runs/"}}))
    assert plan.checkpoint_tier == "s3://team-ckpt/runs"  # the trailing slash dropped
    args = plan.expectations.threshold_args()
    assert args[args.index("--object-tier") + 1] == "s3://team-ckpt/runs/smoke"
    assert "--tier-endpoint" not in args


def test_a_shared_tier_holding_checkpoints_is_the_tier_unless_object_storage_is_declared(tmp_path):
    shared = {"holds": ["datasets", "checkpoints"], "fsx": {}}
    plan = load(tmp_path, aws(count=2, storage={"shared": shared}))
    assert plan.checkpoint_tier == "/shared/checkpoints"
    both = {"shared": shared, "object": {"url": "s3://ckpt/x", "endpoint_url": "https://s3.lab"}}
    plan = load(tmp_path, aws(count=2, storage=both))
    args = plan.expectations.threshold_args()
    assert args[args.index("--object-tier") + 1] == "s3://ckpt/x/smoke"
    assert args[args.index("--tier-endpoint") + 1] == "https://s3.lab"
    plan = load(tmp_path, aws(count=2, storage={"shared": {**shared, "holds": ["datasets"]}}))
    assert (
        plan.checkpoint_tier is None and "--object-tier" not in plan.expectations.threshold_args()
    )
