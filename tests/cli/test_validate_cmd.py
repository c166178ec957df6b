"""`rackform validate` through the real entry point: exit codes, one line per problem, never a
traceback for a user mistake."""

from __future__ import annotations

import json

from blueprint_helpers import AWS_TRAINING, EXAMPLES, rackform


def test_every_example_is_valid_in_every_environment():
    """The one check that the examples shipped in blueprints/ are what they claim: each loads,
    names a `default` and at least one more environment, and passes preflight in each with
    nothing blocking and a monthly cost; through the command a user runs."""
    r = rackform("validate", *EXAMPLES)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(": valid (") == len(EXAMPLES)
    doc = json.loads(rackform("validate", "--json", *EXAMPLES).stdout)
    assert doc["valid"] and not doc["problems"], doc["problems"]
    errors = [f for f in doc["findings"] if f["level"] == "error" and not f["waived"]]
    assert not errors, errors
    assert [f["file"] for f in doc["files"]] == [str(e) for e in EXAMPLES]
    for f in doc["files"]:
        names = [e["name"] for e in f["environments"]]
        assert names[0] == "default" and len(names) >= 2, (f["file"], names)
        for e in f["environments"]:
            assert not e["blocked"], (f["file"], e["name"])
            assert e["cost"]["usd_per_month"] is not None, (f["file"], e["name"], e["cost"])


def test_invalid_exit_2_one_line_each(write):
    bad = write(
        AWS_TRAINING.replace("fabric: efa", "fabric: efaa").replace("count: 2", "count: two")
    )
    r = rackform("validate", bad)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2
    assert all(line.startswith(f"{bad}:") for line in lines)
    assert "Traceback" not in r.stderr


def test_several_files_all_reported(write):
    a = write(AWS_TRAINING.replace("count: 2", "count: -3"), "a.yaml")
    b = write("", "b.yaml")
    r = rackform("validate", a, EXAMPLES[0], b)
    assert r.returncode == 2
    assert f"{a}:12:12: node_groups[0].count" in r.stderr
    assert f"{b}:1:1: the file is empty" in r.stderr


def test_json_output(write):
    bad = write(AWS_TRAINING.replace("owner: team@example.com", "owner: nobody"))
    r = rackform("validate", "--json", bad, EXAMPLES[0])
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["valid"] is False
    (problem,) = doc["problems"]
    assert (problem["line"], problem["path"]) == (3, "owner")
    assert [f["valid"] for f in doc["files"]] == [False, True]
    assert doc["files"][1]["environments"][0]["digest"].startswith("sha256:")


def test_env_option(write):
    path = write(AWS_TRAINING + "environments:\n  dev: {}\n")
    assert rackform("validate", path, "--env", "dev").returncode == 0
    r = rackform("validate", path, "--env", "qa")
    assert r.returncode == 2 and "unknown environment 'qa'" in r.stderr


def test_usage_errors_and_help():
    assert rackform("validate").returncode == 2
    for cmd in ("validate", "schema", "compile"):
        r = rackform(cmd, "--help")
        assert r.returncode == 0 and "Usage" in r.stdout
    r = rackform("--version")
    assert r.returncode == 0 and r.stdout.startswith("rackform ")
