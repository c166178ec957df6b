"""`nvlink_domain_clique`: the Validate stage compares the trays of each rack-scale NVLink domain
(rackform/acceptance/cliques.py) on the reports the trays send. Each report here is what a
tray's host checks write (validators.report's document, through JSON), its `gpu_fabric` the
real check on the recorded `nvidia-smi -q` of a GB200 tray (tests/validators/recorded/, written
in NVIDIA's documented format: no tray is reachable here), with the clique id changed where a
case needs one tray elsewhere. The domains are the ones the plan compiles for a site of two
NVL72 racks (tests/topology_bp.py), hyphenated tray names as users name them."""

from __future__ import annotations

import json
from pathlib import Path

from topology_bp import nvl72_site, plan_of

from rackform.acceptance.cluster import merge_reports
from rackform.stack.cluster import validation_input
from validators import report
from validators.nvlink_domain import fabric_check, parse_fabric

RECORDED = Path(__file__).parents[1] / "validators" / "recorded" / "nvidia-smi-q-gb200-tray.txt"
SMI = "".join(
    line for line in RECORDED.read_text().splitlines(keepends=True) if not line.startswith("#")
)
CLUSTER = "5b0c4f1e-8d3a-4c7e-9a2b-1f6e3d8c7a90"


def tray_report(node: str, clique: str = "32766", fabric: bool = True) -> dict:
    """The tray's report as it reaches the stage; `fabric=False`: host checks run without
    `--imex-members` (no `gpu_fabric` in it)."""
    smi = SMI.replace(": 32766", f": {clique}")
    checks = [fabric_check(parse_fabric(smi), node, expect_gpus=4)] if fabric else []
    checks.append(report.Check("nvml_gpu_count", report.PASS, 4, 4, "GPUs", "==", "", node))
    return json.loads(report.dumps(report.make(checks)))


def site(tmp_path, racks=2, trays=4):
    plan = plan_of(tmp_path, nvl72_site(racks=racks, trays=trays))
    expected = validation_input(plan)["expected"]
    hosts = [n for d in expected["domains"].values() for n in d]
    return expected, hosts


def clique_checks(merged: dict) -> dict[str, dict]:
    return {c["name"]: c for c in merged["checks"] if c["name"].endswith("nvlink_domain_clique")}


def test_the_plan_hands_the_stage_each_nvl72_domain_and_its_trays(tmp_path):
    expected, _ = site(tmp_path)
    domains = expected["domains"]
    assert list(domains.values()) == [
        ["gb1-t01", "gb1-t02", "gb1-t03", "gb1-t04"],
        ["gb2-t01", "gb2-t02", "gb2-t03", "gb2-t04"],
    ]


def test_every_tray_of_each_domain_in_one_clique_passes(tmp_path):
    expected, hosts = site(tmp_path)
    reports = {h: tray_report(h) for h in hosts}
    got = clique_checks(merge_reports(hosts, reports, 0, domains=expected["domains"]))
    assert len(got) == 2
    for name, c in got.items():
        assert c["status"] == "pass", c
        assert c["measured"] == f"cluster {CLUSTER} clique 32766"
        assert c["detail"] == "4 trays" and name.startswith(c["domain"] + "/")


def test_a_tray_in_another_clique_fails_its_domain_only_and_is_named(tmp_path):
    expected, hosts = site(tmp_path)
    reports = {h: tray_report(h) for h in hosts}
    reports["gb2-t03"] = tray_report("gb2-t03", clique="9")
    got = clique_checks(merge_reports(hosts, reports, 0, domains=expected["domains"]))
    first, second = (got[k] for k in sorted(got))
    assert first["status"] == "pass"
    assert second["status"] == "fail" and second["measured"] == "2 cliques"
    assert second["detail"] == (
        f"gb2-t03: cluster {CLUSTER} clique 9 (the other 3 trays: cluster {CLUSTER} clique 32766)"
    )


def test_a_tray_missing_or_without_the_fabric_check_fails_naming_why(tmp_path):
    expected, hosts = site(tmp_path)
    reports = {h: tray_report(h) for h in hosts}
    del reports["gb1-t02"]  # sent nothing
    reports["gb1-t04"] = tray_report("gb1-t04", fabric=False)  # checked without its domain
    reports["gb2-t01"] = tray_report("gb2-t01", clique="N/A")  # not registered
    got = clique_checks(merge_reports(hosts, reports, 2, domains=expected["domains"]))
    first, second = (got[k] for k in sorted(got))
    assert first["status"] == "fail"
    assert first["detail"] == (
        "no cluster and clique from gb1-t02 (no report), gb1-t04 (no gpu_fabric in its report)"
    )
    assert second["status"] == "fail"
    assert second["detail"] == "no cluster and clique from gb2-t01 (gpu_fabric fail)"


def test_an_odd_tray_is_named_even_where_it_is_half_the_domain(tmp_path):
    expected, hosts = site(tmp_path, racks=1, trays=2)
    reports = {"gb1-t01": tray_report("gb1-t01"), "gb1-t02": tray_report("gb1-t02", "7")}
    (c,) = clique_checks(merge_reports(hosts, reports, 0, domains=expected["domains"])).values()
    assert c["status"] == "fail" and "gb1-t02" in c["detail"] and "gb1-t01" in c["detail"]


def test_clusters_without_rack_scale_domains_get_no_clique_check(tmp_path):
    from topology_bp import hgx_rails

    assert "domains" not in validation_input(plan_of(tmp_path, hgx_rails()))["expected"]
    merged = merge_reports(["n1"], {"n1": tray_report("n1")}, 0)
    assert clique_checks(merged) == {}
