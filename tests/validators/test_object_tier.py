"""Checkpoints tiered to a second store (validators/tier.py), every behaviour on both stores:
moto's S3 server on loopback through real boto3, and a directory standing for the cluster's
shared file system (validators/tier_dir.py). Copies go up in the background, complete only
with their manifest, the newest kept, restored byte for byte; the resumable job copying its
checkpoints there and a node that lost its local copy resuming from the tier
(tests/validators/test_resumable.py).

What a test checks on the store is read from the store itself (boto3's client on moto, the
files under the directory), never through the tier under test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from moto_server import REGION, moto_server
from smoke_helpers import MOUNTS, ROOT, env, isolated

from validators.tier import MANIFEST, ObjectTier, TierError, parse
from validators.tier_dir import DirStore, NoSuchKey

BUCKET = "ml-ckpts"


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


@dataclass
class S3:
    """A bucket on moto's S3."""

    client: object

    def url(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def refusing(self) -> tuple[str, str]:
        """A tier the store refuses, and what its refusal says."""
        return "s3://no-such-bucket/run", "NoSuchBucket"

    def keys(self, prefix: str = "") -> list[str]:
        page = self.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for o in page.get("Contents", []))

    def write(self, key: str, body: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=body)


@dataclass
class Shared:
    """A directory standing for the shared file system's."""

    root: Path

    def url(self, prefix: str) -> str:
        """The tier's directory; its parent there, as the cluster's /shared/checkpoints is."""
        (self.root / prefix).parent.mkdir(parents=True, exist_ok=True)
        return str(self.root / prefix)

    def refusing(self) -> tuple[str, str]:
        # The shared file system not mounted: the tier's parent is not there.
        return str(self.root / "not-mounted" / "run"), "does not exist"

    def keys(self, prefix: str = "") -> list[str]:
        found = (p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())
        return sorted(k for k in found if k.startswith(prefix))

    def write(self, key: str, body: bytes) -> None:
        (self.root / key).parent.mkdir(parents=True, exist_ok=True)
        (self.root / key).write_bytes(body)


@pytest.fixture(params=["s3", "dir"])
def store(request, tmp_path):
    """Each test on moto's S3 and on a shared directory."""
    if request.param == "dir":
        yield Shared(tmp_path / "shared")
        return
    mp = request.getfixturevalue("monkeypatch")
    endpoint = request.getfixturevalue("endpoint")
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_S3": endpoint}.items():  # fmt: skip
        mp.setenv(k, v)
    c = boto3.client("s3")
    c.create_bucket(Bucket=BUCKET)
    yield S3(c)
    for o in c.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        c.delete_object(Bucket=BUCKET, Key=o["Key"])
    c.delete_bucket(Bucket=BUCKET)


def checkpoint(root, step: int, mb: int = 2) -> str:
    d = root / f"step-{step:08d}"
    (d / "shards").mkdir(parents=True)
    (d / "shards" / "__0_0.distcp").write_bytes(os.urandom(mb << 20))
    (d / "progress.json").write_text(f'{{"step": {step}}}')
    return str(d)


def test_copies_go_up_in_the_background_and_the_newest_are_kept(store, tmp_path):
    tier = ObjectTier(store.url("llm-7b/run-1"), keep=2)
    for step in (10, 20, 30):
        tier.put(step, checkpoint(tmp_path, step))
        tier._queue.join()  # each copy done before the next checkpoint, as on a quiet store
    summary = tier.close(60)
    assert summary["errors"] == [] and not summary["unfinished"]
    assert [c["step"] for c in summary["copies"]] == [10, 20, 30]
    assert all(c["bytes"] == (2 << 20) + len('{"step": 10}') for c in summary["copies"])
    assert all(c["gbps"] > 0 and c["lag_s"] >= c["seconds"] for c in summary["copies"])
    # Only the newest two remain, each with every file and its manifest (and, in a directory,
    # no file half-written or left behind).
    assert tier.steps() == [20, 30]
    assert store.keys() == [
        f"llm-7b/run-1/step-{s:08d}/{f}"
        for s in (20, 30)
        for f in (MANIFEST, "progress.json", "shards/__0_0.distcp")
    ]


def test_a_checkpoint_a_newer_one_overtook_is_superseded_not_an_error(store, tmp_path):
    # Checkpoints come faster than the store takes them, and the node keeps only the newest:
    # the older ones queued are left (their files may be gone already), the newest is copied.
    tier = ObjectTier(store.url("run-4"), keep=2)
    for step in (10, 20, 30):
        tier.put(step, checkpoint(tmp_path, step))
    (tmp_path / "step-00000010").rename(tmp_path / "pruned")  # the node pruned it meanwhile
    summary = tier.close(60)
    assert summary["errors"] == [] and summary["newest"] == 30
    assert [c["step"] for c in summary["copies"]][-1] == 30
    assert sorted([c["step"] for c in summary["copies"]] + summary["superseded"]) == [10, 20, 30]
    # Nothing of a superseded copy is left on the store: only complete copies.
    keys = store.keys("run-4/")
    assert {k.split("/")[1] for k in keys} == {f"step-{s:08d}" for s in tier.steps()}


def test_a_copy_without_its_manifest_is_never_restored(store, tmp_path):
    tier = ObjectTier(store.url("run-2"))
    tier.put(10, checkpoint(tmp_path, 10))
    tier.close(60)
    # A copy cut short: its files went up, its manifest never did.
    store.write("run-2/step-00000020/progress.json", b'{"step": 20}')
    assert tier.steps() == [10]


def test_a_restore_is_byte_for_byte_and_checked_against_the_manifest(store, tmp_path):
    src = tmp_path / "node-a"
    tier = ObjectTier(store.url("run-3"))
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
    store.write("run-3/step-00000040/progress.json", b"{}")
    with pytest.raises(TierError, match="the manifest says"):
        tier.restore(40, str(dst / ".step-00000040.tmp"), str(dst / "step-00000041"))
    assert not (dst / "step-00000041").exists()


def test_a_store_that_refuses_is_an_error_of_the_copy_never_of_training(store, tmp_path):
    url, refusal = store.refusing()
    tier = ObjectTier(url)
    tier.put(10, checkpoint(tmp_path, 10))
    summary = tier.close(60)
    assert summary["copies"] == [] and len(summary["errors"]) == 1
    assert summary["errors"][0].startswith("step 10: ") and refusal in summary["errors"][0]


@pytest.mark.parametrize(
    "url", ["ml-ckpts/run", "s3://", "s3://UPPER/run", "gs://b/p", "file://rel/p", "", "/"]
)
def test_a_url_that_is_neither_s3_nor_a_directory_is_named_with_both_forms(url):
    with pytest.raises(TierError, match="is not an object-tier URL") as e:
        parse(url)
    assert "s3://BUCKET/PREFIX" in str(e.value) and "/ABS/PATH" in str(e.value)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ckpts/job-42", "a directory must be an absolute path"),
        ("./job-42", "a directory must be an absolute path"),
        ("file://shared/job-42", "three slashes"),
        ("/shared/../etc", "no '..'"),
        ("file:///shared/ckpts/../..", "no '..'"),
    ],
)
def test_a_relative_path_or_one_with_dotdot_is_refused_saying_why(url, said):
    with pytest.raises(TierError, match="is not an object-tier URL") as e:
        parse(url)
    assert said in str(e.value)


@pytest.mark.parametrize(
    "url", ["/shared/ckpts/job-42", "/shared/ckpts/job-42/", "file:///shared/ckpts/job-42"]
)
def test_a_directory_is_a_tier_in_either_form(url):
    assert parse(url) == ("/shared/ckpts/job-42", "")


@pytest.mark.parametrize("key", ["../escape", "run/../../escape", "/etc/passwd", ""])
def test_a_key_that_would_leave_the_tiers_directory_is_refused(tmp_path, key):
    store = DirStore()
    with pytest.raises(TierError, match="a relative path inside the tier"):
        store.put_object(Bucket=str(tmp_path), Key=key, Body=b"x")
    with pytest.raises(TierError, match="a relative path inside the tier"):
        store.delete_object(Bucket=str(tmp_path), Key=key)
    assert list(tmp_path.iterdir()) == []


def test_the_directory_store_answers_as_s3_does(tmp_path):
    store, root = DirStore(), str(tmp_path / "tier")
    # Nothing there yet: an empty listing; a missing key's delete is no error, its read is one.
    assert store.list_objects_v2(Bucket=root, Prefix="")["Contents"] == []
    store.delete_object(Bucket=root, Key="run/step-00000001/COMPLETE")
    with pytest.raises(NoSuchKey):
        store.get_object(Bucket=root, Key="run/step-00000001/COMPLETE")
    with pytest.raises(FileNotFoundError):  # what the restore reports, as boto3's NoSuchKey
        store.download_file(root, "run/a", str(tmp_path / "a"))
    for key in ("run/b/2", "run/a", "run/b/1", "runs/x", "other"):
        store.put_object(Bucket=root, Key=key, Body=key.encode())
    # A listing is the keys under a prefix (a string prefix, as S3's), sorted; one page.
    page = store.list_objects_v2(Bucket=root, Prefix="run")
    assert [o["Key"] for o in page["Contents"]] == ["run/a", "run/b/1", "run/b/2", "runs/x"]
    assert not page["IsTruncated"]
    assert [o["Key"] for o in store.list_objects_v2(Bucket=root, Prefix="run/b/")["Contents"]] == [
        "run/b/1",
        "run/b/2",
    ]
    assert store.get_object(Bucket=root, Key="run/b/1")["Body"].read() == b"run/b/1"
    # A delete leaves no empty directory behind; the tier's own stays.
    store.delete_object(Bucket=root, Key="run/b/1")
    store.delete_object(Bucket=root, Key="run/b/2")
    assert not (tmp_path / "tier" / "run" / "b").exists() and (tmp_path / "tier" / "run").is_dir()
    store.delete_object(Bucket=root, Key="other")
    assert (tmp_path / "tier").is_dir()


def test_a_file_half_written_is_never_seen(tmp_path):
    # A writer cut off mid-file (killed, its node lost) leaves only its temporary name: never
    # listed, never read as the key, and the key keeps its last complete contents.
    store, root = DirStore(), str(tmp_path / "tier")
    store.put_object(Bucket=root, Key="run/COMPLETE", Body=b"old, complete")

    class Cut(Exception):
        pass

    def half(fh):
        fh.write(b"new, half")
        raise Cut

    with pytest.raises(Cut):
        store._write(root, "run/COMPLETE", half)
    assert store.get_object(Bucket=root, Key="run/COMPLETE")["Body"].read() == b"old, complete"
    assert os.listdir(tmp_path / "tier" / "run") == ["COMPLETE"]  # the half file removed
    # One left by a process that died before it could remove it is not listed either.
    (tmp_path / "tier" / "run" / ".tier-tmp-COMPLETE.1234abcd").write_bytes(b"new, ha")
    keys = [o["Key"] for o in store.list_objects_v2(Bucket=root, Prefix="")["Contents"]]
    assert keys == ["run/COMPLETE"]


def test_a_copy_one_node_made_is_restored_by_another(tmp_path):
    """Two nodes, two tiers (as two jobs' processes hold them) on the same shared directory:
    what the first copied, the second (a replacement node with an empty array) restores."""
    shared = tmp_path / "shared"
    shared.mkdir()
    url = f"file://{shared}/job-42"
    first = ObjectTier(url, keep=2)
    for step in (10, 20):
        first.put(step, checkpoint(tmp_path / "node-a", step))
    assert first.close(60)["errors"] == []
    second = ObjectTier(str(shared / "job-42"), keep=2)
    assert second.steps() == [10, 20] or second.steps() == [20]  # 10 may have been overtaken
    dst = tmp_path / "node-b"
    dst.mkdir()
    n = second.restore(20, str(dst / ".step-00000020.tmp"), str(dst / "step-00000020"))
    a, b = tmp_path / "node-a" / "step-00000020", dst / "step-00000020"
    assert n == sum(f.stat().st_size for f in a.rglob("*") if f.is_file())
    assert sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()) == [
        "progress.json",
        "shards/__0_0.distcp",
    ]
    assert (a / "shards" / "__0_0.distcp").read_bytes() == (
        b / "shards" / "__0_0.distcp"
    ).read_bytes()
    # A step the tier does not hold is an error the restore path reports, not a crash elsewhere.
    with pytest.raises(FileNotFoundError, match="no such key"):
        second.restore(30, str(dst / ".step-00000030.tmp"), str(dst / "step-00000030"))
    assert not (dst / "step-00000030").exists()


COPY_ONE = """
import json, sys
from validators.tier import ObjectTier
tier = ObjectTier(sys.argv[1])
tier.put(10, sys.argv[2])
print(json.dumps(tier.close(60)))
"""


def test_an_unwritable_directory_is_the_copys_error(tmp_path):
    """Not root: the directory's mode 0555. Root (whom no mode stops): a read-only bind mount
    of it, in a private mount namespace for the copying process alone."""
    tier = tmp_path / "shared" / "job-42"
    tier.mkdir(parents=True)
    node = checkpoint(tmp_path / "node", 10)
    if os.geteuid() != 0:
        tier.chmod(0o555)
        prefix, said = [], "PermissionError"
    elif MOUNTS:
        prefix, said = isolated(f"mount --bind -o ro {tier} {tier}"), "Read-only file system"
    else:
        pytest.skip("root without mount namespaces: no way to make a directory unwritable")
    try:
        r = subprocess.run(
            [*prefix, sys.executable, "-c", COPY_ONE, str(tier), node],
            capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60,
        )  # fmt: skip
    finally:
        tier.chmod(0o755)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["copies"] == [] and len(summary["errors"]) == 1
    assert summary["errors"][0].startswith("step 10: ") and said in summary["errors"][0]
    assert list(tier.iterdir()) == []


def test_a_tier_path_that_is_a_file_is_the_copys_error(tmp_path):
    (tmp_path / "job-42").write_text("not a directory")
    tier = ObjectTier(str(tmp_path / "job-42"))
    tier.put(10, checkpoint(tmp_path / "node", 10))
    summary = tier.close(60)
    assert summary["copies"] == [] and summary["errors"] == [
        f"step 10: TierError: {tmp_path / 'job-42'} is not a directory"
    ]


def test_nothing_planted_in_the_tiers_tree_sends_a_write_elsewhere_or_stands_in_for_a_key(
    tmp_path,
):
    # Any user of the shared file system can place links in the tier's tree before a node
    # (root) writes or reads there: a directory of a key's path linked out of the tier, a key
    # linked to a file outside it, the tier's own directory a link. None is followed.
    store, root = DirStore(), tmp_path / "tier"
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "shadow").write_text("root's own\n")
    root.mkdir()
    (root / "run").symlink_to(outside)
    with pytest.raises(OSError, match="symbolic link"):
        store.put_object(Bucket=str(root), Key="run/shadow", Body=b"written through the link")
    assert (outside / "shadow").read_text() == "root's own\n"
    assert sorted(p.name for p in outside.iterdir()) == ["shadow"]  # no temporary file either
    with pytest.raises(OSError, match="symbolic link"):
        store.get_object(Bucket=str(root), Key="run/shadow")
    # A key that is a link to a file outside: not listed, not read, not copied out.
    (root / "job").mkdir()
    (root / "job" / "step-1").symlink_to(outside / "shadow")
    store.put_object(Bucket=str(root), Key="job/step-2", Body=b"a checkpoint")
    keys = [o["Key"] for o in store.list_objects_v2(Bucket=str(root), Prefix="job/")["Contents"]]
    assert keys == ["job/step-2"]
    with pytest.raises(OSError, match="symbolic link"):
        store.get_object(Bucket=str(root), Key="job/step-1")
    with pytest.raises(OSError, match="symbolic link"):
        store.download_file(str(root), "job/step-1", str(tmp_path / "copied"))
    assert not (tmp_path / "copied").exists()
    # Writing the key replaces the link itself, never the file it points at.
    store.put_object(Bucket=str(root), Key="job/step-1", Body=b"new")
    assert not (root / "job" / "step-1").is_symlink()
    assert (outside / "shadow").read_text() == "root's own\n"
    # The tier's own directory a link: refused, saying so.
    linked = tmp_path / "linked-tier"
    linked.symlink_to(outside)
    with pytest.raises(TierError, match="symbolic link"):
        store.put_object(Bucket=str(linked), Key="a", Body=b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["shadow"]
