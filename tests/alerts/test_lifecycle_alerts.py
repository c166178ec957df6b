"""The alert rules on `rackform metrics`' series, under `promtool test rules`: repairs slower
than lifecycle.mttr_alert_hours over 7 days, more failures in a day than the node share allows;
one failure in a fresh series is one (no extrapolation), and a failure a day ago is not today's."""

from __future__ import annotations

import subprocess
import textwrap

from blueprint_helpers import rackform
from test_alert_rules import promtool

BP = """\
name: dc-a
purpose: training
owner: ops@example.com
target: {type: bare_metal}
node_groups:
  - name: gpu
    gpu: H100-SXM
    gpus_per_node: 8
    hosts: [{name: gpu-a-01, address: 10.9.0.1}, {name: gpu-a-02, address: 10.9.0.2}]
network: {fabric: ethernet}
lifecycle: {mttr_alert_hours: 24}
"""

ID = 'cluster="dc-a",environment="default",purpose="training",instance="ctl:9100",job="rackform"'
EXP = "{severity: warning, cluster: dc-a, environment: default, purpose: training, instance: 'ctl:9100', job: rackform}"

TESTS = f"""\
rule_files: [dc-a.rules.yml]
evaluation_interval: 1m
tests:
  # Hourly scrapes. Failures: history of 5 before, one at 2h (no alert: the limit is one),
  # two more at 4h (three in the day: alerts), none after: 24 h on, the day holds none.
  # Repairs: one of an hour at 2h (no alert), one of 59 h at 4h: mean 30 h over 7 days > 24 h.
  - interval: 1h
    input_series:
      - series: 'rackform_lifecycle_failures_total{{{ID}}}'
        values: '5 5 6 6 8x40'
      - series: 'rackform_lifecycle_repairs_total{{{ID}}}'
        values: '0 0 1 1 2x40'
      - series: 'rackform_lifecycle_repair_seconds_total{{{ID}}}'
        values: '0 0 3600 3600 216000x40'
    alert_rule_test:
      - eval_time: 3h
        alertname: RackformFailuresHigh
        exp_alerts: []
      - eval_time: 5h
        alertname: RackformFailuresHigh
        exp_alerts:
          - exp_labels: {EXP}
            exp_annotations:
              summary: 'dc-a (default): more than 1 node failures in a day'
              description: '3 failures detected in the last 24 h (lifecycle.failures_alert_node_share: 0.02 of 2 nodes): a fleet-wide cause (driver, firmware, power, cooling) is likelier than that many bad nodes.'
      - eval_time: 30h
        alertname: RackformFailuresHigh
        exp_alerts: []
      - eval_time: 3h
        alertname: RackformRepairsSlow
        exp_alerts: []
      - eval_time: 5h
        alertname: RackformRepairsSlow
        exp_alerts:
          - exp_labels: {EXP}
            exp_annotations:
              summary: 'dc-a (default): failed nodes take over 24 h to return'
              description: 'Mean time to repair over the last 7 days 1d 6h 0m 0s (lifecycle.mttr_alert_hours: 24): look at the tickets heal left and the nodes waiting for a person (`rackform status`).'
"""


def test_promtool_unit_tests_of_the_lifecycle_rules(tmp_path):
    bp = tmp_path / "dc-a.yaml"
    bp.write_text(BP)
    r = rackform("alerts", bp, "-o", tmp_path)
    assert r.returncode == 0, r.stderr
    tests = tmp_path / "tests.yml"
    tests.write_text(textwrap.dedent(TESTS))
    done = subprocess.run(
        [promtool(), "test", "rules", str(tests)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
