"""Checkpoints tiered to object storage (validators/tier.py) against moto's S3 server on
loopback through real boto3: copies in the background, complete only with their manifest, the
newest kept, restored byte for byte; the resumable job copying its checkpoints there and a node
that lost its local copy resuming from the tier (tests/validators/test_resumable.py)."""

from __future__ import annotations

import os

import boto3
import pytest
from moto_server import REGION, moto_server

from validators.tier import MANIFEST, ObjectTier, TierError, parse

BUCKET = "ml-ckpts"


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


@pytest.fixture
def s3(endpoint, monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_S3": endpoint}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    c = boto3.client("s3")
    c.create_bucket(Bucket=BUCKET)
    yield c
    for o in c.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        c.delete_object(Bucket=BUCKET, Key=o["Key"])
    c.delete_bucket(Bucket=BUCKET)


def checkpoint(root, step: int, mb: int = 2) -> str:
    d = root / f"step-{step:08d}"
    (d / "shards").mkdir(parents=True)
    (d / "shards" / "__0_0.distcp").write_bytes(os.urandom(mb << 20))
    (d / "progress.json").write_text(f'{{"step": {step}}}')
    return str(d)


def test_copies_go_up_in_the_background_and_the_newest_are_kept(s3, tmp_path):
    tier = ObjectTier(f"s3://{BUCKET}/llm-7b/run-1", keep=2)
    for step in (10, 20, 30):
        tier.put(step, checkpoint(tmp_path, step))
        tier._queue.join()  # each copy done before the next checkpoint, as on a quiet store
    summary = tier.close(60)
    assert summary["errors"] == [] and not summary["unfinished"]
    assert [c["step"] for c in summary["copies"]] == [10, 20, 30]
    assert all(c["bytes"] == (2 << 20) + len('{"step": 10}') for c in summary["copies"])
    assert all(c["gbps"] > 0 and c["lag_s"] >= c["seconds"] for c in summary["copies"])
    # Only the newest two remain, each with every file and its manifest.
    assert tier.steps() == [20, 30]
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert keys == [
        f"llm-7b/run-1/step-{s:08d}/{f}"
        for s in (20, 30)
        for f in (MANIFEST, "progress.json", "shards/__0_0.distcp")
    ]


def test_a_checkpoint_a_newer_one_overtook_is_superseded_not_an_error(s3, tmp_path):
    # Checkpoints come faster than the store takes them, and the node keeps only the newest:
    # the older ones queued are left (their files may be gone already), the newest is copied.
    tier = ObjectTier(f"s3://{BUCKET}/run-4", keep=2)
    for step in (10, 20, 30):
        tier.put(step, checkpoint(tmp_path, step))
    (tmp_path / "step-00000010").rename(tmp_path / "pruned")  # the node pruned it meanwhile
    summary = tier.close(60)
    assert summary["errors"] == [] and summary["newest"] == 30
    assert [c["step"] for c in summary["copies"]][-1] == 30
    assert sorted([c["step"] for c in summary["copies"]] + summary["superseded"]) == [10, 20, 30]
    # Nothing of a superseded copy is left on the store: only complete copies.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="run-4/")["Contents"]]
    assert {k.split("/")[1] for k in keys} == {f"step-{s:08d}" for s in tier.steps()}


def test_a_copy_without_its_manifest_is_never_restored(s3, tmp_path):
    tier = ObjectTier(f"s3://{BUCKET}/run-2")
    tier.put(10, checkpoint(tmp_path, 10))
    tier.close(60)
    # A copy cut short: its files went up, its manifest never did.
    s3.upload_file(
        str(tmp_path / "step-00000010" / "progress.json"),
        BUCKET,
        "run-2/step-00000020/progress.json",
    )
    assert tier.steps() == [10]


def test_a_restore_is_byte_for_byte_and_checked_against_the_manifest(s3, tmp_path):
    src = tmp_path / "node-a"
    tier = ObjectTier(f"s3://{BUCKET}/run-3")
    tier.put(40, checkpoint(src, 40, mb=3))
    tier.close(60)
    dst = tmp_path / "node-b"
    dst.mkdir()
    n = tier.restore(40, str(dst / ".step-00000040.tmp"), str(dst / "step-00000040"))
    a, b = src / "step-00000040", dst / "step-00000040"
    assert n == (3 << 20) + len('{"step": 40}')
    assert (a / "shards" / "__0_0.distcp").read_bytes() == (
        b / "shards" / "__0_0.distcp"
    ).read_bytes()
    assert not (dst / ".step-00000040.tmp").exists()
    # An object shorter than its manifest says (a store that lost data) is refused, and the
    # node's directory keeps what it had.
    s3.put_object(Bucket=BUCKET, Key="run-3/step-00000040/progress.json", Body=b"{}")
    with pytest.raises(TierError, match="the manifest says"):
        tier.restore(40, str(dst / ".step-00000040.tmp"), str(dst / "step-00000041"))
    assert not (dst / "step-00000041").exists()


def test_a_store_that_refuses_is_an_error_of_the_copy_never_of_training(s3, tmp_path):
    tier = ObjectTier("s3://no-such-bucket/run")
    tier.put(10, checkpoint(tmp_path, 10))
    summary = tier.close(60)
    assert summary["copies"] == [] and len(summary["errors"]) == 1
    assert summary["errors"][0].startswith("step 10: ") and "NoSuchBucket" in summary["errors"][0]


@pytest.mark.parametrize("url", ["ml-ckpts/run", "s3://", "s3://UPPER/run", "gs://b/p"])
def test_a_url_that_is_not_s3_is_named(url):
    with pytest.raises(TierError, match="is not an object-tier URL"):
        parse(url)
