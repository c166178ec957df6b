"""Files written where other users can write (validators/nofollow.py): a report in /tmp, where
the smoke job's docstring sends it, written whole and through no link anyone placed beside it
or at its name."""

from __future__ import annotations

import json
import os
import stat

import pytest

from validators import nofollow, smoke

SHADOW = b"root:$6$secret:19000:0:99999:7:::\n"


@pytest.fixture
def shadow(tmp_path):
    outside = tmp_path / "etc"
    outside.mkdir()
    f = outside / "shadow"
    f.write_bytes(SHADOW)
    return f


@pytest.fixture
def tmp(tmp_path):
    d = tmp_path / "tmp"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def test_the_smoke_report_is_written_through_no_link(tmp, shadow):
    path = tmp / "smoke.json"
    (tmp / f"smoke.json.tmp{os.getpid()}").symlink_to(shadow)  # the name it was written under
    job = smoke.Job(str(path), True, {"run": "r1"})
    job.flush()
    assert shadow.read_bytes() == SHADOW
    assert json.loads(path.read_text())["job"]["run"] == "r1"
    path.unlink()
    path.symlink_to(shadow)  # at its own name: replaced, not written through
    job.flush()
    assert shadow.read_bytes() == SHADOW
    assert not path.is_symlink() and json.loads(path.read_text())["job"]["run"] == "r1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_write_whole_leaves_nothing_beside_the_file(tmp):
    nofollow.write_whole(str(tmp / "r.json"), "{}")
    nofollow.write_whole(str(tmp / "r.json"), b"[]")
    assert [p.name for p in tmp.iterdir()] == ["r.json"]
    assert (tmp / "r.json").read_text() == "[]"


def test_a_file_is_opened_only_if_it_is_a_regular_file_of_the_owner(tmp_path, shadow):
    d = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (tmp_path / "link").symlink_to(shadow)
        with pytest.raises(nofollow.Unsafe, match="link is a symbolic link"):
            nofollow.open_file("link", d)
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(nofollow.Unsafe, match="fifo is not a regular file"):
            nofollow.open_file("fifo", d)
        (tmp_path / "f").write_text("x")
        with pytest.raises(nofollow.Unsafe, match="f is owned by uid"):
            nofollow.open_file("f", d, owner=os.geteuid() + 1)
        os.close(nofollow.open_file("f", d, owner=os.geteuid()))
    finally:
        os.close(d)
