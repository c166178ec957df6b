"""`rackform dashboards`: the generated dashboard's every query selects series rackform exports
(`rackform metrics`' families, `rackform alerts`' recording rules, the dcgm-exporter counters
the dcgm role scrapes) by the labels they carry, and each one, with its variables set, answers
on a real Prometheus holding those series with the figure they hold."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

import yaml
from blueprint_helpers import ROOT, rackform
from servers import Gpu, Series, prometheus, query

from rackform.lifecycle.record import Store
from rackform.lifecycle.repairs import from_log
from rackform.scheduler.records import parse
from rackform.scheduler.usage import usage
from rackform.telemetry.labels import Key
from rackform.telemetry.textfile import FAMILIES, Measured, exposition

BP = """\
name: dc-a
purpose: training
owner: ops@example.com
target: {type: bare_metal}
node_groups:
  - name: gpu
    gpu: H100-SXM
    gpus_per_node: 8
    hosts: [{name: gpu-a-01, address: 10.9.0.1}]
network: {fabric: ethernet}
"""
JOBS = """\
JobID|User|Account|Partition|State|Start|End|ElapsedRaw|AllocTRES|NodeList
41|alice|ml|batch|COMPLETED|2026-11-25T10:00:00|2026-11-25T12:00:00|7200||gpu-a-01
"""
VARS = {"$cluster": "dc-a", "$environment": "default"}


def panels(doc: dict) -> list[dict]:
    out = []
    for p in doc["panels"]:
        out += [p, *p.get("panels", [])]
    return [p for p in out if p.get("targets")]


def exported(tmp_path) -> set[str]:
    """Every series name rackform exports or records: the textfile's families, the recording
    rules `rackform alerts` writes, the dcgm role's default counters."""
    bp = tmp_path / "dc-a.yaml"
    bp.write_text(BP)
    r = rackform("alerts", bp, "-o", tmp_path / "rules")
    assert r.returncode == 0, r.stderr
    rules = yaml.safe_load((tmp_path / "rules" / "dc-a.rules.yml").read_text())
    records = {rule["record"] for g in rules["groups"] for rule in g["rules"] if "record" in rule}
    role = yaml.safe_load((ROOT / "roles" / "dcgm" / "defaults" / "main.yml").read_text())
    return set(FAMILIES) | records | set(role["dcgm_exporter_counters"])


def test_every_query_selects_exported_series_and_answers(tmp_path):
    r = rackform("dashboards", "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "out" / "rackform-clusters.json").read_text())
    targets = [(p["title"], t["expr"]) for p in panels(doc) for t in p["targets"]]
    assert len(targets) >= 8
    known = exported(tmp_path)
    for title, expr in targets:
        names = set(re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", expr))
        assert names and names <= known, (title, names - known)
        assert 'cluster="$cluster",environment="$environment"' in expr, title

    # A real Prometheus holding the cluster's series: each query answers with what they hold.
    store = Store(tmp_path / "state", "dc-a-default", kind="heal")
    t0 = time.time() - 3600
    store.audit("heal", kind="heal", nodes={"gpu-a-01": "reboot"}, ts=t0)
    store.audit("batch", kind="heal", nodes=["gpu-a-01"], status="done", ts=t0 + 1200)
    rel, _ = from_log(store.log.path, "dc-a-default")
    jobs = usage(parse(JOBS, "sacct"), {"gpu-a-01": 8}, 2.5, datetime.now())
    text = exposition([Measured(Key("dc-a", "default", "training"), rel, jobs)])
    series = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, labels, value = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line).groups()
        pairs = tuple(tuple(kv.split("=", 1)) for kv in labels.split(","))
        pairs = tuple((k, v.strip('"')) for k, v in pairs)
        series.append(Series(name, pairs, float(value), start_min=60))
    gpus = [Gpu("dc-a", "default", "training", "gpu-a-01", i, 70.0, start_min=60) for i in (0, 1)]
    answers = {}
    with prometheus(gpus, tmp_path / "prom", series=series) as url:
        for title, expr in targets:
            for var, value in VARS.items():
                expr = expr.replace(var, value)
            answers[title] = query(url, expr)  # a query that does not parse fails here (400)
    value = {t: float(a[0]["value"][1]) for t, a in answers.items() if a}
    assert value["GPU utilization against the 85% target"] == 70.0
    assert value["Mean time to repair"] == 1200.0
    assert value["Mean time to repair per node"] == 1200.0
    assert value["Failed nodes not returned"] == 0.0
    assert value["Failures in the last 24 h"] == 0.0  # the one failure predates the series
    assert value["GPU-hours per team"] == 16.0  # 8 GPUs x 2 h
    assert value["Cost per team"] == 40.0  # at $2.5 a GPU-hour
