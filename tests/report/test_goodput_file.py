"""The goodput file `rackform report --goodput` reads: GPU-hours lost by cause per stack, read
as given; every mistake one line naming the file and the entry, never a traceback; the command
refuses a stack none of the blueprints is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blueprint_helpers import rackform

from rackform.report.model import GoodputError, load_goodput


def test_a_file_is_read_as_given(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("dc-a-prod: {lost: {restarts: 12.5, redone work: 30}, paid_gpu_hours: 850}\n")
    (g,) = load_goodput(path).values()
    assert dict(g.lost) == {"restarts": 12.5, "redone work": 30.0}
    assert g.fraction == pytest.approx(0.95)  # 1 - 42.5 / 850
    path.write_text('{"dc-a-prod": {"lost": {"restarts": 1}}}')  # JSON; no paid GPU-hours
    assert load_goodput(path)["dc-a-prod"].fraction is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[1, 2]", "give a mapping of stack"),
        ("dc-a-prod: {lost: 5}", '"dc-a-prod": give `lost`'),
        ("dc-a-prod: {lost: {restarts: -1}}", '"dc-a-prod": lost: restarts: -1 is not a number'),
        ("dc-a-prod: {lost: {restarts: .nan}}", "lost: restarts: nan is not a number"),
        ("dc-a-prod: {lost: {restarts: yes}}", "lost: restarts: True is not a number"),
        ("dc-a-prod: {lost: {a: 1}, paid: 3}", "unknown key 'paid'"),
        (
            "dc-a-prod: {lost: {a: 9}, paid_gpu_hours: 3}",
            "9 GPU-hours lost is more than the 3 paid",
        ),
        ("dc-a-prod: {lost: {a: 1]", "not YAML or JSON"),
    ],
)
def test_each_mistake_is_named(tmp_path, text, why):
    path = tmp_path / "g.yaml"
    path.write_text(text)
    with pytest.raises(GoodputError) as exc:
        load_goodput(path)
    assert str(exc.value).startswith(f"{path}: ") and why in str(exc.value), str(exc.value)


def test_the_command_refuses_a_stack_no_blueprint_is(tmp_path):
    bp = tmp_path / "dc-a.yaml"
    bp.write_text(
        "name: dc-a\npurpose: training\nowner: ops@example.com\ntarget: {type: bare_metal}\n"
        "node_groups:\n  - name: gpu\n    gpu: H100-SXM\n    gpus_per_node: 8\n"
        "    hosts: [{name: n1, address: 10.9.0.1}]\nnetwork: {fabric: ethernet}\n"
    )
    g = tmp_path / "g.yaml"
    g.write_text("dc-a-prod: {lost: {restarts: 1}}\n")
    r = rackform("report", bp, "-o", tmp_path / "r.html", "--goodput", g,
                 "--state-dir", tmp_path)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "dc-a-prod: no such stack among the blueprints given (dc-a-default)" in r.stderr
    assert not (tmp_path / "r.html").exists()


def test_what_rackform_goodput_writes_is_read_in_the_mode_asked(tmp_path):
    example = Path(__file__).parents[2] / "examples" / "goodput" / "h100-512.yaml"
    sim = rackform("goodput", example, "--json", "--days", "1")
    assert sim.returncode == 0, sim.stderr
    path = tmp_path / "sim.json"
    path.write_text(sim.stdout)
    doc = json.loads(sim.stdout)
    (cluster,) = doc["clusters"]
    for mode in ("elastic", "requeue"):
        (g,) = load_goodput(path, mode).values()
        assert dict(g.lost) == pytest.approx(cluster["modes"][mode]["lost_gpu_hours"])
        assert g.paid_gpu_hours == cluster["paid_gpu_hours"]
        assert g.fraction == pytest.approx(
            cluster["modes"][mode]["goodput"], abs=1e-5
        )  # printed to 5 places
    assert list(load_goodput(path)) == [cluster["scenario"]] == ["h100-512-default"]
    path.write_text(json.dumps({"clusters": [{"scenario": "x", "modes": {"requeue": {}}}]}))
    with pytest.raises(GoodputError, match=r"clusters\[0\]: no 'elastic' mode \(it has requeue\)"):
        load_goodput(path)
