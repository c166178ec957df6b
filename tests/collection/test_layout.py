"""The collection is put together from the repository's top level (roles/, validators/,
collection/): what goes where, that a checkout's copy follows every change of a source (edited,
added, removed) and only then is made again, that callers at the same time all get a whole
copy, and that the checkout's copy rackform runs is exactly the top level."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from dist_build import ROOT, tracked

from rackform import collection, paths


def checkout(root: Path) -> Path:
    files = {
        "collection/galaxy.yml": "namespace: rackform\nname: gpu\n",
        "collection/playbooks/site.yml": "- hosts: all\n",
        "collection/tests/output/junk.txt": "ansible-test's\n",
        "roles/nvme_raid/tasks/main.yml": "- name: A task\n",
        "roles/nvme_raid/__pycache__/x.cpython-311.pyc": "cache",
        "validators/smoke.py": "print('smoke')\n",
        "validators/__pycache__/smoke.cpython-311.pyc": "cache",
        "README.md": "not the collection's\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def listing(d: Path) -> dict[str, str]:
    return {p.relative_to(d).as_posix(): p.read_text() for p in d.rglob("*") if p.is_file()}


def test_each_source_goes_where_the_collection_has_it(tmp_path):
    root = checkout(tmp_path / "repo")
    assert collection.is_source(root) and not collection.is_source(tmp_path)
    built = collection.built(root, tmp_path / "build")
    assert built == tmp_path / "build" / "ansible_collections" / "rackform" / "gpu"
    assert listing(built) == {
        "galaxy.yml": "namespace: rackform\nname: gpu\n",
        "playbooks/site.yml": "- hosts: all\n",
        "roles/nvme_raid/tasks/main.yml": "- name: A task\n",
        "roles/smoke_train/files/validators/smoke.py": "print('smoke')\n",
    }


def test_the_copy_follows_every_change_and_only_then_is_made_again(tmp_path):
    root = checkout(tmp_path / "repo")
    out = tmp_path / "build"
    built = collection.built(root, out)
    (built / "marker").write_text("still the same copy")
    assert (collection.built(root, out) / "marker").is_file()  # nothing changed: kept

    task = root / "roles/nvme_raid/tasks/main.yml"
    task.write_text("- name: An edited task\n")
    os.utime(task, ns=(1, 1))  # an edit that keeps the size still changes the stamp
    built = collection.built(root, out)
    assert not (built / "marker").exists()
    assert (built / "roles/nvme_raid/tasks/main.yml").read_text() == "- name: An edited task\n"

    (root / "validators/train.py").write_text("train\n")
    (root / "collection/playbooks/site.yml").unlink()
    got = listing(collection.built(root, out))
    assert got["roles/smoke_train/files/validators/train.py"] == "train\n"
    assert "playbooks/site.yml" not in got
    # No leftovers beside the collection: old copies and half-made ones are gone.
    assert sorted(p.name for p in built.parent.iterdir()) == ["gpu"]


def test_callers_at_the_same_time_each_get_a_whole_copy(tmp_path):
    root = checkout(tmp_path / "repo")
    (root / "roles/nvme_raid/files").mkdir()
    for i in range(40):
        (root / f"roles/nvme_raid/files/f{i}.txt").write_text(str(i))
    out = tmp_path / "build"
    want = len(listing(collection.built(root, out)))
    (root / "validators/new.py").write_text("new\n")
    seen: list[int] = []

    def call():
        seen.append(len(listing(collection.built(root, out))))

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [want + 1] * 6


def test_the_checkouts_collection_is_exactly_the_top_level():
    where = {
        "collection/": "",
        "roles/": "roles/",
        "validators/": "roles/smoke_train/files/validators/",
    }
    expected = {
        dest + path.removeprefix(source): path
        for source, dest in where.items()
        for path in tracked(source)
    }
    built = paths.collection()
    assert built == ROOT / "build" / "ansible_collections" / "rackform" / "gpu"
    shipped = {
        p.relative_to(built).as_posix()
        for p in built.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and "output" not in p.parts
    }
    assert shipped == set(expected)
    for rel, source in expected.items():
        assert (built / rel).read_bytes() == (ROOT / source).read_bytes(), rel
