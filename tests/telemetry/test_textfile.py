"""`rackform metrics`: each cluster's failures, time to repair and between failures from its
audit log, in a .prom file that `promtool check metrics` accepts and a real node_exporter's
textfile collector serves with the figures computed by hand (tests/lifecycle/test_repairs.py's
history), a hostile node name escaped, never breaking the file."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request

import pytest
from blueprint_helpers import rackform
from loopback import free_port

from rackform.lifecycle.record import Store
from rackform.lifecycle.repairs import from_log, reliability
from rackform.telemetry.labels import Key
from rackform.telemetry.textfile import Measured, exposition

T0 = 1_800_000_000.0

BP = """\
name: dc-a
purpose: training
owner: ops@example.com
target: {type: bare_metal}
node_groups:
  - name: gpu
    gpu: H100-SXM
    gpus_per_node: 8
    hosts:
      - {name: gpu-a-01, address: 10.9.0.1}
      - {name: gpu-a-02, address: 10.9.0.2}
network: {fabric: ethernet}
"""


JOBS = """\
JobID|User|Account|Partition|State|Start|End|ElapsedRaw|AllocTRES|NodeList
41|alice|ml|batch|COMPLETED|2026-11-25T10:00:00|2026-11-25T12:00:00|7200||gpu-a-0[1-2]
42|bob|re"search|batch|COMPLETED|2026-11-25T12:00:00|2026-11-25T13:00:00|3600||gpu-a-0[1-2]
"""


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: run scripts/setup.sh --test")
    return path


def serve(textfile_dir, tmp_path) -> str:
    """A real node_exporter with only its textfile collector over `textfile_dir`: its /metrics."""
    port = free_port()
    argv = [need("prometheus-node-exporter"), "--collector.disable-defaults",
            "--collector.textfile", f"--collector.textfile.directory={textfile_dir}",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    log = (tmp_path / "exporter.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                if proc.poll() is not None or time.monotonic() > end:
                    pytest.fail(f"node_exporter: {(tmp_path / 'exporter.log').read_text()}")
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_the_command_writes_what_node_exporter_serves(tmp_path):
    bp = tmp_path / "dc-a.yaml"
    bp.write_text(BP)
    state = tmp_path / "state"
    store = Store(state, "dc-a-default", kind="heal")
    store.audit("heal", kind="heal", nodes={"gpu-a-01": "reboot", "gpu-a-02": "reset"}, ts=T0)
    store.audit("batch", kind="heal", nodes=["gpu-a-01"], status="done", ts=T0 + 600)
    store.audit("batch", kind="heal", nodes=["gpu-a-02"], status="done", ts=T0 + 900)
    store.audit("ticket", kind="heal", node="gpu-a-02", action="drain", ts=T0 + 3600)
    with store.log.path.open("a") as f:
        f.write('{"event": "heal", "ts": 18000')  # a line cut short by hand
    jobs = tmp_path / "sacct.txt"
    jobs.write_text(JOBS)
    out = tmp_path / "textfile"
    out.mkdir()
    r = rackform("metrics", bp, "--state-dir", state, "--textfile", out / "rackform.prom",
                 "--jobs", f"dc-a-default={jobs}")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"{store.log.path}:5: not a JSON entry (cut short or edited): skipped" in r.stderr
    text = (out / "rackform.prom").read_text()
    done = subprocess.run([need("promtool"), "check", "metrics"], input=text,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    served = serve(out, tmp_path)
    assert "node_textfile_scrape_error 0" in served
    ident = 'cluster="dc-a",environment="default",purpose="training"'
    node = 'cluster="dc-a",environment="default",node="gpu-a-02"'
    for line in (
        f"rackform_lifecycle_failures_total{{{ident}}} 3",
        f"rackform_lifecycle_repairs_total{{{ident}}} 2",
        f"rackform_lifecycle_repair_seconds_total{{{ident}}} 1500",
        f"rackform_lifecycle_open_failures{{{ident}}} 1",
        f"rackform_lifecycle_mttr_seconds{{{ident}}} 750",
        f"rackform_lifecycle_tbf_seconds{{{ident}}} 1800",  # 0, 0, 3600: two gaps
        # node_exporter writes the labels in order of their names
        f'rackform_lifecycle_node_mttr_seconds{{{node},purpose="training"}} 900',
        f'rackform_lifecycle_node_failures_total{{{node},purpose="training"}} 2',
        # Two jobs of 16 GPUs (their nodes' GPUs: no TRES), 2 h for ml and 1 h for research;
        # bare metal has no catalog price: no USD series.
        f'rackform_jobs_account_gpu_seconds{{account="ml",{ident}}} 115200',
        f'rackform_jobs_account_gpu_seconds{{account="re\\"search",{ident}}} 57600',
    ):
        assert line in served.splitlines(), line
    assert "rackform_jobs_account_usd" not in served


def test_a_node_name_from_a_log_cannot_break_the_file(tmp_path):
    store = Store(tmp_path, "x-default")
    evil = 'n1"} 1\nrackform_lifecycle_failures_total{cluster="other\\'
    store.audit("heal", kind="heal", nodes={evil: "reboot"}, ts=T0)
    store.audit("batch", kind="heal", nodes=[evil], status="done", ts=T0 + 60)
    r, _ = from_log(store.log.path, "x-default")
    text = exposition([Measured(Key("x", "default", "training"), r)])
    done = subprocess.run([need("promtool"), "check", "metrics"], input=text,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert sum(ln.startswith("rackform_lifecycle_failures_total") for ln in text.splitlines()) == 1


def test_no_repair_recorded_is_no_figure_never_zero(tmp_path):
    r, _ = reliability([], "x-default")
    text = exposition([Measured(Key("x", "default", "training"), r)])
    assert "rackform_lifecycle_mttr_seconds" not in text
    assert "rackform_lifecycle_tbf_seconds" not in text
    assert (
        'rackform_lifecycle_failures_total{cluster="x",environment="default",purpose="training"} 0'
        in text
    )


def test_a_path_the_collector_would_not_read_is_refused(tmp_path):
    bp = tmp_path / "dc-a.yaml"
    bp.write_text(BP)
    r = rackform("metrics", bp, "--state-dir", tmp_path, "--textfile", tmp_path / "m.txt")
    assert r.returncode == 2
    assert "reads only *.prom files" in r.stderr and "Traceback" not in r.stderr
