"""The loader: every mistake located as FILE:LINE:COL: path: message, all reported at once."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL
from slurm_local import PARTITIONS, blueprint

from rackform.blueprint.loader import load_all, load_effective
from rackform.blueprint.problems import BlueprintError


def problems(path, env=None):
    with pytest.raises(BlueprintError) as exc:
        load_all(path) if env is None else load_effective(path, env)
    return [str(p) for p in exc.value.problems]


def test_environment_override_merges_named_items(write):
    path = write(AWS_TRAINING + "environments:\n  dev: {node_groups: [{name: gpu, count: 1}]}\n")
    base, dev = load_all(path)
    assert base.blueprint.node_groups[0].count == 2
    assert dev.blueprint.node_groups[0].count == 1
    assert dev.blueprint.node_groups[0].instance_type == "p5.48xlarge"  # kept from the base
    assert dev.digest != base.digest


def test_remove_drops_a_named_item(write):
    path = write(
        BARE_METAL
        + "environments:\n  small: {node_groups: [{name: hgx, hosts: [{name: n2, remove: true}]}]}\n"
    )
    small = load_effective(path, "small")
    assert [h.name for h in small.blueprint.node_groups[0].hosts] == ["n1"]


def test_all_errors_at_once_each_located(write):
    path = write(
        """
        name: t-cluster
        purpose: training
        owner: team@example.com
        target:
          type: aws
          region: us-east-1
          availability_zone: us-east-1a
          ssh_cidrs: [10.20.0.0/33]
          markt: spot
        node_groups:
          - name: gpu
            instance_type: p5.48xlarge
            count: -1
        network: {fabric: efa}
        software: {driver_branch: 550}
        """
    )
    out = problems(path)
    assert out == [
        f"{path}:8:15: target.ssh_cidrs[0]: '10.20.0.0/33' is not a valid CIDR ('10.20.0.0/33' does not appear to be an IPv4 or IPv6 network); write e.g. 10.20.0.0/16",
        f"{path}:9:3: target.markt: unknown field 'markt' (fix: did you mean 'market'?)",
        f"{path}:13:12: node_groups[0].count: Input should be greater than or equal to 0",
        f'{path}:15:27: software.driver_branch: Input should be a valid string (fix: quote it: "550" (YAML reads unquoted 550 as a number))',
    ]


def test_missing_field_points_at_its_parent(write):
    path = write(AWS_TRAINING.replace("  region: us-east-1\n", ""))
    (line,) = problems(path)
    assert line.startswith(f"{path}:5:3: target.region: required field 'region' is missing")


def test_cross_field_rule_is_located_at_the_field(write):
    path = write(AWS_TRAINING.replace("p5.48xlarge", "g5.xlarge"))
    (line,) = problems(path)
    assert (
        line
        == f"{path}:11:20: node_groups[0].instance_type: g5.xlarge has no EFA interface (fix: choose an EFA-capable type or fabric: ethernet)"
    )


def test_error_in_an_override_points_at_the_override(write):
    path = write(
        AWS_TRAINING + "environments:\n  dev:\n    node_groups: [{name: gpu, count: many}]\n"
    )
    (line,) = problems(path)
    assert line.startswith(
        f"{path}:16:38: node_groups[0].count [env dev]: Input should be a valid integer"
    )


def test_an_error_in_an_override_list_item_names_its_index_in_the_file(write):
    # The override's third item (`[2]`, batch-gpu) is the effective list's second: scav-low is
    # removed and extra appended. The path named must be the file's, beside the right line.
    text = blueprint().replace(
        "lifecycle:",
        "environments:\n  dev:\n    scheduler:\n      partitions:\n"
        f"        - {{name: {PARTITIONS[1]}, remove: true}}\n"
        "        - {name: extra, node_groups: [gpu]}\n"
        f"        - {{name: {PARTITIONS[0]}, priority_tier: high}}\n"
        "lifecycle:",
    )
    path = write(text)
    lines = text.splitlines()
    row = next(i for i, t in enumerate(lines, 1) if "priority_tier: high" in t)
    col = lines[row - 1].index("high") + 1
    (line,) = problems(path)
    assert line.startswith(
        f"{path}:{row}:{col}: scheduler.partitions[2].priority_tier [env dev]: Input should be"
    ), line


@pytest.mark.parametrize(
    "field,value", [("purpose", "inference"), ("target", "{type: bare_metal}")]
)
def test_environment_may_not_change_purpose_or_target_type(write, field, value):
    path = write(AWS_TRAINING + f"environments:\n  dev:\n    {field}: {value}\n")
    out = problems(path, "dev")
    assert any("an environment may not change" in p and p.startswith(f"{path}:16:") for p in out)


def test_unknown_environment(write):
    path = write(AWS_TRAINING + "environments:\n  dev: {}\n  prod: {}\n")
    (line,) = problems(path, "prd")
    assert "unknown environment 'prd' (valid: default, dev, prod)" in line
    assert "did you mean 'prod'?" in line


def test_duplicate_keys_are_errors_never_last_wins(write):
    path = write(AWS_TRAINING + "network: {fabric: ethernet}\n")
    (line,) = problems(path)
    assert line.startswith(f"{path}:14:1: duplicate key 'network' (first at line 13)")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("", "the file is empty"),
        ("# only a comment\n", "the file is empty"),
        ("- a\n- b\n", "the top level is a list, not a mapping"),
        ("just text\n", "the top level is a str, not a mapping"),
        ("name: [unclosed\n", "invalid YAML"),
        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
        ("a: &x [1, *x]\n", "an alias refers to a value that contains it"),
    ],
)
def test_malformed_files(write, text, expected):
    path = write(text) if text else write("")
    (line,) = problems(path)
    assert line.startswith(str(path)) and expected in line


def test_missing_file_and_directory(tmp_path):
    assert problems(tmp_path / "nope.yaml") == [f"{tmp_path / 'nope.yaml'}: no such file"]
    assert problems(tmp_path) == [f"{tmp_path}: is a directory, not a blueprint file"]


def test_not_utf8(tmp_path):
    path = tmp_path / "bp.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    (line,) = problems(path)
    assert "is not UTF-8 text" in line


@contextlib.contextmanager
def as_nobody():
    """Root reads files regardless of their mode: as root (CI), read as `nobody` for a while."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


def test_unreadable_file():
    # A directory `nobody` may enter, so the file's own mode is what refuses the read.
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        path = Path(d) / "bp.yaml"
        path.write_text(AWS_TRAINING, encoding="utf-8")
        path.chmod(0)
        with as_nobody():
            got = problems(path)
    assert got == [f"{path}: cannot be read (permission denied)"]


def test_unknown_target_type_points_at_the_type(write):
    (line,) = problems(write(AWS_TRAINING.replace("type: aws", "type: gcp")))
    assert line.endswith(
        ":5:9: target.type: unknown type 'gcp' (fix: one of: aws, bare_metal, colocation)"
    )


def test_wrong_shape_of_a_section(write):
    (line,) = problems(write(AWS_TRAINING.replace("network: {fabric: efa}", "network: efa")))
    assert ":13:10: network: Input should be a valid dictionary" in line


def test_schema_errors_and_catalog_lookups_in_one_run(write):
    # An unknown key used to hide the unknown instance type until the key was fixed.
    path = write(
        AWS_TRAINING.replace(
            "  ssh_cidrs: [10.20.0.0/16]", "  ssh_cidrs: [10.20.0.0/16]\n  markt: spot"
        )
        .replace("p5.48xlarge", "p5.48xlarg")
        .replace("fabric: efa", "fabric: infiniband")
    )
    found = problems(path)
    assert any("target.markt: unknown field 'markt'" in p for p in found), found
    assert any(
        "node_groups[0].instance_type: unknown instance type 'p5.48xlarg'" in p
        and "did you mean 'p5.48xlarge'?" in p
        for p in found
    ), found
    assert any("network.fabric: infiniband is not available on aws" in p for p in found), found
    lines = [int(p.split(":")[1]) for p in found]
    assert lines == sorted(lines)  # in the order of the file


def test_catalog_lookups_run_for_every_group_that_parsed(write):
    path = write(
        BARE_METAL.replace("gpu: H100-SXM", "gpu: H100-SMX").replace(
            "purpose: training", "purpose: training\ndescription: [not, text]"
        )
    )
    found = problems(path)
    assert any("description" in p for p in found), found
    assert any("unknown GPU model 'H100-SMX'" in p for p in found), found
