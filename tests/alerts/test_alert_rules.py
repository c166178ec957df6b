"""`rackform alerts` writes rules a stock Prometheus loads: `promtool check rules` passes on the
rules for every example blueprint, and `promtool test rules` runs them over input series and
checks which alerts fire (the way kube-prometheus tests its alerts)."""

from __future__ import annotations

import shutil
import subprocess
import textwrap

import pytest
import yaml
from blueprint_helpers import EXAMPLES, rackform


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: scripts/setup.sh --test installs prometheus")
    return path


def test_rules_for_every_example_pass_promtool_check(tmp_path):
    r = rackform("alerts", *EXAMPLES, "-o", tmp_path)
    assert r.returncode == 0, r.stderr
    files = sorted(tmp_path.glob("*.rules.yml"))
    assert len(files) == len(EXAMPLES)
    done = subprocess.run(
        [promtool(), "check", "rules", *map(str, files)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


BP = """\
name: t1
purpose: training
owner: ops@example.com
target: {type: bare_metal}
node_groups:
  - name: gpu
    gpu: H100-SXM
    gpus_per_node: 2
    hosts: [{name: n1, address: 10.9.0.1}]
network: {fabric: ethernet}
lifecycle:
  utilization_alert_minutes: 30
  idle: {gpu_util_below_pct: 10, for_minutes: 60, action: notify}
"""

LABELS = 'cluster="t1",environment="default",purpose="training",node="n1"'

TESTS = f"""\
rule_files: [t1.rules.yml]
evaluation_interval: 1m
tests:
  # Busy at 90% for an hour, then 50%: the utilization alert fires once 30 minutes average
  # below 80%, never while busy; the cluster is not idle.
  - interval: 1m
    input_series:
      - series: 'DCGM_FI_DEV_GPU_UTIL{{{LABELS},gpu="0"}}'
        values: '90x60 50x60'
      - series: 'DCGM_FI_DEV_GPU_UTIL{{{LABELS},gpu="1"}}'
        values: '90x60 50x60'
      - series: 'DCGM_FI_DEV_FB_USED{{{LABELS},gpu="0"}}'
        values: '20000x120'
      - series: 'DCGM_FI_DEV_FB_USED{{{LABELS},gpu="1"}}'
        values: '20000x120'
    alert_rule_test:
      - eval_time: 50m
        alertname: RackformGpuUtilizationLow
        exp_alerts: []
      - eval_time: 100m
        alertname: RackformGpuUtilizationLow
        exp_alerts:
          - exp_labels: {{severity: warning, cluster: t1, environment: default, purpose: training}}
            exp_annotations:
              summary: t1 (default) GPU utilization below 80% over 30 min
              description: Average 50.0% across the cluster's GPUs; the target is 85%.
      - eval_time: 100m
        alertname: RackformClusterIdle
        exp_alerts: []
    promql_expr_test:
      - expr: rackform_cluster:gpu_util:avg
        eval_time: 100m
        exp_samples:
          - labels: 'rackform_cluster:gpu_util:avg{{cluster="t1",environment="default",purpose="training"}}'
            value: 50
  # Idle at 2% with empty memory for 90 minutes: the idle alert fires, and the idle GPU-hours
  # of the 60-minute window are 2 GPUs x 1 hour.
  - interval: 1m
    input_series:
      - series: 'DCGM_FI_DEV_GPU_UTIL{{{LABELS},gpu="0"}}'
        values: '2x90'
      - series: 'DCGM_FI_DEV_GPU_UTIL{{{LABELS},gpu="1"}}'
        values: '2x90'
      - series: 'DCGM_FI_DEV_FB_USED{{{LABELS},gpu="0"}}'
        values: '0x90'
      - series: 'DCGM_FI_DEV_FB_USED{{{LABELS},gpu="1"}}'
        values: '0x90'
    alert_rule_test:
      - eval_time: 80m
        alertname: RackformClusterIdle
        exp_alerts:
          - exp_labels: {{severity: warning, cluster: t1, environment: default, purpose: training}}
            exp_annotations:
              summary: 't1 (default) idle: every GPU below 10% at every sample for 60m'
              description: '`rackform reap` would notify it (lifecycle.idle.action: notify).'
    promql_expr_test:
      - expr: rackform_cluster:idle_gpu_hours:window
        eval_time: 80m
        exp_samples:
          - labels: 'rackform_cluster:idle_gpu_hours:window{{cluster="t1",environment="default",purpose="training",window="60m"}}'
            value: 2
  # One GPU stops reporting and the exporter goes down: GPUs missing, exporter down; an XID
  # and uncorrectable ECC errors on the other GPU.
  - interval: 1m
    input_series:
      - series: 'DCGM_FI_DEV_GPU_UTIL{{{LABELS},gpu="0"}}'
        values: '90x30'
      - series: 'DCGM_FI_DEV_GPU_UTIL{{{LABELS},gpu="1"}}'
        values: '90x5'
      - series: 'up{{{LABELS},job="dcgm"}}'
        values: '1x5 0x25'
      - series: 'DCGM_FI_DEV_XID_ERRORS{{{LABELS},gpu="0"}}'
        values: '0x10 79x20'
      - series: 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{LABELS},gpu="0"}}'
        values: '0x10 3x20'
    alert_rule_test:
      - eval_time: 25m
        alertname: RackformGpuMissing
        exp_alerts:
          - exp_labels: {{severity: critical, cluster: t1, environment: default, purpose: training}}
            exp_annotations:
              summary: 't1 (default): fewer GPUs report than the 2 declared'
              description: 1 GPUs report DCGM_FI_DEV_GPU_UTIL.
      - eval_time: 25m
        alertname: RackformDcgmExporterDown
        exp_alerts:
          - exp_labels: {{severity: critical, cluster: t1, environment: default, purpose: training, node: n1, job: dcgm}}
            exp_annotations:
              summary: dcgm-exporter on n1 is down
              description: 'Prometheus cannot scrape it: the node''s GPUs are unmonitored and reap reads the cluster as unknown.'
      - eval_time: 15m
        alertname: RackformGpuXidError
        exp_alerts:
          - exp_labels: {{severity: critical, cluster: t1, environment: default, purpose: training, node: n1, gpu: "0"}}
            exp_annotations:
              summary: XID 79 on n1 GPU 0
              description: The driver reported an XID error; check dmesg and the job on that GPU.
      - eval_time: 15m
        alertname: RackformGpuEccUncorrectable
        exp_alerts:
          - exp_labels: {{severity: critical, cluster: t1, environment: default, purpose: training, node: n1, gpu: "0"}}
            exp_annotations:
              summary: Uncorrectable ECC errors on n1 GPU 0
              description: Drain the node and reset or replace the GPU.
"""


def test_promtool_unit_tests_of_the_rules(tmp_path):
    bp = tmp_path / "t1.yaml"
    bp.write_text(BP)
    r = rackform("alerts", bp, "-o", tmp_path)
    assert r.returncode == 0, r.stderr
    assert (
        yaml.safe_load((tmp_path / "t1.rules.yml").read_text())["groups"][0]["name"]
        == "rackform-t1-default"
    )
    tests = tmp_path / "tests.yml"
    tests.write_text(textwrap.dedent(TESTS))
    done = subprocess.run(
        [promtool(), "test", "rules", str(tests)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_bad_blueprint_writes_no_rules(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(BP)
    bad.write_text(BP.replace("action: notify", "action: destroy"))
    out = tmp_path / "rules"
    r = rackform("alerts", good, bad, "-o", out)
    assert r.returncode == 2
    assert f"{bad}:13:" in r.stderr and "destroy is not an idle action" in r.stderr
    assert not out.exists()
