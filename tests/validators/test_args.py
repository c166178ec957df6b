"""The smoke job's arguments: device-dependent defaults, and mistakes refused before anything
starts (argparse's exit 2, no traceback)."""

from __future__ import annotations

import os

import pytest

from rackform.blueprint.schema.sections import FABRICS
from validators import args, collectives
from validators.args import parse


def test_cpu_defaults():
    a = parse(["--device", "cpu"])
    assert a.preset == "tiny" and a.model.d_model == 64
    assert a.lr == 3e-3
    assert a.allreduce_max_mb == 1.0 and a.checkpoint_threads == 1
    assert a.loss_drop == 0.2 and a.collective_timeout_s == 120.0


def test_gpu_defaults_without_a_gpu():
    a = parse(["--device", "cuda"])  # parsing only: nothing touches a GPU here
    assert a.preset == "default" and a.model.d_model == 1536
    assert a.allreduce_max_mb == 4096.0 and a.checkpoint_threads == 4


def test_overrides_reach_the_model():
    a = parse(["--device", "cpu", "--layers", "3", "--seq-len", "32"])
    assert (a.model.layers, a.model.seq_len) == (3, 32)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "1"], "--steps must be at least 2"),
        (["--loss-drop", "1.5"], "--loss-drop must be between 0 and 1"),
        (["--d-model", "66"], "d_model 66 is not a multiple of heads 4"),
        (["--allreduce-min-mb", "8", "--allreduce-max-mb", "1"], "exceeds --allreduce-max-mb"),
        (["--expect-fabric", "carrier-pigeon"], "invalid choice: 'carrier-pigeon'"),
        (["--object-tier", "ckpts/smoke"], "--object-tier: 'ckpts/smoke' is not an object-tier"),
        (["--object-tier", "gs://b/p"], "write s3://BUCKET/PREFIX, or a shared directory"),
        (["--object-tier", "/shared/smoke", "--tier-wait-s", "-1"], "must not be negative"),
    ],
)
def test_mistakes_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse(["--device", "cpu", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_the_tier_is_optional_and_takes_either_form():
    assert parse(["--device", "cpu"]).object_tier is None
    for url in ("s3://ml-ckpts/smoke", "/shared/smoke", "file:///shared/smoke"):
        a = parse(["--device", "cpu", "--object-tier", url])
        assert (a.object_tier, a.tier_wait_s) == (url, 120.0)


def test_a_stores_endpoint_reaches_boto3_as_its_s3_endpoint_variable(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    parse(["--device", "cpu", "--object-tier", "s3://ckpt/smoke"])
    assert "AWS_ENDPOINT_URL_S3" not in os.environ
    parse(
        [
            "--device",
            "cpu",
            "--object-tier",
            "s3://ckpt/smoke",
            "--tier-endpoint",
            "http://127.0.0.1:9",
        ]
    )
    assert os.environ["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9"


def test_the_fabrics_are_the_schemas():
    # validators/ are shipped to nodes and never import rackform: their fabric lists are copies
    # of the schema's, kept equal here.
    assert args.FABRICS == FABRICS
    assert set(collectives.FABRIC_NETWORK) == set(FABRICS)
