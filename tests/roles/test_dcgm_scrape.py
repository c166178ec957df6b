"""The dcgm role's Prometheus scrape config, proven with a real Prometheus on loopback.

Ansible runs the role's own scrape tasks (roles/dcgm/tasks/scrape.yml) over the local connection
for three inventory hosts, one of which the role skips as it does a GPU-less host: every node
is a node_exporter target, only the other two dcgm-exporter targets. Real
Prometheus (Debian's package, installed by scripts/setup.sh --test) loads a configuration made
by pasting the written snippet under `scrape_configs`, passes `promtool check config`, scrapes
each target and answers a query with the role's labels. dcgm-exporter needs a GPU, so each
node's exporter is stood in for by a small HTTP server on 127.0.0.1 serving its text format.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from loopback import free_port, http_server

from rackform.push.playbook import RunResult, run_playbook
from rackform.push.site import CLUSTER_TAG

PLAY = """
- name: The dcgm role's scrape config
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: A host without GPUs is one the role skips (its preflight says why)
      ansible.builtin.set_fact:
        _dcgm_skip_reason: dcgm skipped on cpu-node
      when: inventory_hostname == 'cpu-node'
    - name: The role's scrape tasks
      ansible.builtin.include_role:
        name: rackform.gpu.dcgm
        tasks_from: scrape.yml
"""

# What dcgm-exporter serves for one GPU (its text format, the role's first counter).
METRICS = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-{uuid}",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="{host}"}} {util}
"""


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: scripts/setup.sh --test installs Prometheus")
    return path


# What node_exporter's md collector serves for a node's checkpoint array.
NODE_METRICS = """\
# HELP node_md_disks_required Total number of disks of device.
# TYPE node_md_disks_required gauge
node_md_disks_required{{device="md0"}} {disks}
"""


@contextmanager
def fake_exporter(host: str, util: int, text: str = METRICS):
    """Stands in for dcgm-exporter (which needs a GPU), or node_exporter: serves /metrics on
    127.0.0.1."""
    body = text.format(uuid=f"{util:08d}", host=host, util=util, disks=util).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path.split("?")[0] == "/metrics"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body if ok else b"")

        def log_message(self, *args):
            pass

    with http_server(Handler) as port:
        yield port


@contextmanager
def prometheus(config: Path, data: Path):
    """Real Prometheus on a free loopback port; stopped (and waited for) at the end."""
    port = free_port()
    log = (data / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            _need("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={data / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def api(base: str, path: str, **params) -> dict:
    url = f"{base}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]


def wait_for(what: str, probe, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last:
                return last
        except OSError as exc:  # not listening yet
            last = exc
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


def run_scrape_tasks(
    tmp_path: Path,
    ports: dict[str, int],
    limit: str | None = None,
    node_ports: dict[str, int] | None = None,
    **extravars,
) -> RunResult:
    """The role's scrape tasks for a GPU-less `cpu-node` and one node per exporter port;
    `node_ports`, node_exporter's port on each host (cpu-node's included)."""
    play = tmp_path / "scrape.yml"
    play.write_text(textwrap.dedent(PLAY))
    hosts = {"cpu-node": dict(LOCAL)}
    for name, port in ports.items():
        hosts[name] = {**LOCAL, "dcgm_scrape_address": "127.0.0.1", "dcgm_exporter_port": port}
    for name, port in (node_ports or {}).items():
        hosts[name] |= {"dcgm_scrape_address": "127.0.0.1", "dcgm_node_exporter_port": port}
    inv = {
        "all": {
            "vars": {
                "rackform_cluster": "llm-train-a",
                "rackform_environment": "dev",
                "rackform_purpose": "training",
            },
            "children": {"gpu_nodes": {"children": {"ng_gpu": {"hosts": hosts}}}},
        }
    }
    lines: list[str] = []
    # The hosts are this machine (a local connection): host_bootstrap must install nothing here.
    extravars = {"host_bootstrap_packages": [], **extravars}
    result = run_playbook(inv, playbook=play, extravars=extravars, limit=limit, out=lines.append)
    assert result.rc == 0, "\n".join(lines)
    return result


def write_scrape_config(
    tmp_path: Path, ports: dict[str, int], node_ports: dict[str, int] | None = None
) -> Path:
    out = tmp_path / "reports" / "prometheus-dcgm.yml"
    out.parent.mkdir()
    run_scrape_tasks(tmp_path, ports, node_ports=node_ports, dcgm_prometheus_file=str(out))
    return out


def test_prometheus_scrapes_every_node_the_role_configured_with_its_labels(tmp_path):
    promtool = _need("promtool")
    with (
        fake_exporter("node-a", 42) as port_a,
        fake_exporter("node-b", 17) as port_b,
        fake_exporter("node-a", 2, NODE_METRICS) as node_a,
        fake_exporter("node-b", 4, NODE_METRICS) as node_b,
        fake_exporter("cpu-node", 0, NODE_METRICS) as node_cpu,
    ):
        ports = {"node-a": port_a, "node-b": port_b}
        node_ports = {"node-a": node_a, "node-b": node_b, "cpu-node": node_cpu}
        snippet = write_scrape_config(tmp_path, ports, node_ports).read_text()
        jobs = {j["job_name"]: j for j in yaml.safe_load(snippet)}
        # The node the role skips: node_exporter's target, not dcgm-exporter's.
        assert "cpu-node" not in json.dumps(jobs["dcgm"])
        assert "cpu-node" in json.dumps(jobs["node"])

        # What a user does with it: paste it under scrape_configs.
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + snippet
        )
        check = subprocess.run(
            [promtool, "check", "config", str(config)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr

        with prometheus(config, tmp_path) as base:

            def targets_up():
                active = api(base, "targets")["activeTargets"]
                up = len(active) == 5 and all(t["health"] == "up" for t in active)
                return active if up else None

            def series(query: str, count: int):
                def probe():
                    result = api(base, "query", query=query)["result"]
                    return result if len(result) == count else None

                return probe

            targets = wait_for("every target up", targets_up)
            util = wait_for(
                "DCGM_FI_DEV_GPU_UTIL from both nodes", series("DCGM_FI_DEV_GPU_UTIL", 2)
            )
            disks = wait_for("node_md_disks_required from 3", series("node_md_disks_required", 3))

    by_job = {
        job: sorted(t["labels"]["instance"] for t in targets if t["labels"]["job"] == job)
        for job in ("dcgm", "node")
    }
    assert by_job == {
        "dcgm": sorted(f"127.0.0.1:{p}" for p in ports.values()),
        "node": sorted(f"127.0.0.1:{p}" for p in node_ports.values()),
    }
    got = {s["metric"]["node"]: s for s in util}
    assert set(got) == {"node-a", "node-b"}
    for node, value in (("node-a", 42), ("node-b", 17)):
        labels = got[node]["metric"]
        assert labels["instance"] == f"127.0.0.1:{ports[node]}"
        assert labels["cluster"] == "llm-train-a"
        assert labels["environment"] == "dev"
        assert labels["purpose"] == "training"
        assert float(got[node]["value"][1]) == value
    # node_exporter's series carry the same labels: heal joins them to the GPUs' by node.
    md = {s["metric"]["node"]: s for s in disks}
    assert {n: float(s["value"][1]) for n, s in md.items()} == {
        "node-a": 2.0, "node-b": 4.0, "cpu-node": 0.0,
    }  # fmt: skip
    for s in md.values():
        assert s["metric"]["cluster"] == "llm-train-a" and s["metric"]["job"] == "node"
        assert s["metric"]["purpose"] == "training" and s["metric"]["environment"] == "dev"


def test_a_cluster_without_gpus_gets_node_exporters_job_alone(tmp_path):
    # A report directory that does not exist yet (`configure --role dcgm --report-dir new/`).
    out = tmp_path / "reports" / "new" / "prometheus-dcgm.yml"
    run_scrape_tasks(tmp_path, {}, node_ports={"cpu-node": 9100}, dcgm_prometheus_file=str(out))
    jobs = yaml.safe_load(out.read_text())
    assert [j["job_name"] for j in jobs] == ["node"]
    assert jobs[0]["static_configs"] == [
        {
            "targets": ["127.0.0.1:9100"],
            "labels": {"cluster": "llm-train-a", "environment": "dev", "purpose": "training",
                       "node": "cpu-node"},
        }
    ]  # fmt: skip


def test_no_file_is_written_unless_asked(tmp_path):
    result = run_scrape_tasks(tmp_path, {"n1": 9400})
    # The config's tasks run once, on the play's first host: nothing changed on either host,
    # and nothing but the play itself is here. (A count of skipped tasks was asserted before:
    # it counted host_bootstrap's tasks too, and broke when that role gained two.)
    assert {h: s.changed for h, s in result.hosts.items()} == {"cpu-node": 0, "n1": 0}
    assert [p.name for p in tmp_path.rglob("*")] == ["scrape.yml"]


def test_a_partial_run_leaves_the_clusters_scrape_config_as_it_is(tmp_path):
    # Under --limit the play sees part of the cluster: writing the config from that view
    # would drop the other nodes from monitoring.
    out = write_scrape_config(tmp_path, {"n1": 9400, "n2": 9401})
    whole = out.read_text()
    assert "9400" in whole and "9401" in whole
    result = run_scrape_tasks(tmp_path, {"n1": 9500, "n2": 9501}, limit="n1",
                              dcgm_prometheus_file=str(out))  # fmt: skip
    assert out.read_text() == whole
    assert result.hosts["n1"].changed == 0


# The role's preflight on one host, as the GPU roles' play runs it: here, with no GPU and
# dcgm_require_gpu false, it decides to skip the host (and says so in a fact).
PREFLIGHT = """
- name: The dcgm role's preflight, where it decides to skip a host
  hosts: gpu_nodes
  gather_facts: true
  gather_subset: [min, network]
  tasks:
    - name: The role's preflight
      ansible.builtin.include_role:
        name: rackform.gpu.dcgm
        tasks_from: preflight.yml
      when: inventory_hostname == 'cpu-node'
"""


def test_the_scrape_config_written_in_a_later_pass_knows_which_hosts_the_role_skipped(tmp_path):
    # The runner's last pass (its cluster-wide plays, after a retry brought a node back) is a
    # new ansible-playbook run: it knows which hosts the dcgm role skipped, and their addresses,
    # only from the run's fact cache, where the first pass left them. Here the first pass is
    # the role's preflight (cpu-node: skipped, no GPU), the second the site playbook's own
    # cluster-wide pass, with nothing else.
    play = tmp_path / "preflight.yml"
    play.write_text(textwrap.dedent(PREFLIGHT))
    hosts = {
        name: {**LOCAL, "dcgm_scrape_address": "127.0.0.1", "dcgm_exporter_port": port,
               "dcgm_node_exporter_port": port + 1}
        for name, port in (("cpu-node", 9400), ("node-a", 9410))
    }  # fmt: skip
    inv = {"all": {"vars": {"rackform_cluster": "llm-train-a"},
                   "children": {"gpu_nodes": {"children": {"ng": {"hosts": hosts}}}}}}  # fmt: skip
    out = tmp_path / "reports" / "prometheus-dcgm.yml"
    extra = {"host_bootstrap_packages": [], "dcgm_require_gpu": False,
             "dcgm_prometheus_file": str(out)}  # fmt: skip

    def site_cluster_pass(cache: Path) -> dict:
        lines: list[str] = []
        done = run_playbook(
            inv, extravars={**extra, "rackform_facts_from_this_run": True},
            tags=[CLUSTER_TAG], skip_tags=["slurm", "smoke_train"],
            fact_cache=cache, out=lines.append,
        )  # fmt: skip
        assert done.rc == 0, "\n".join(lines)
        assert "== Write the cluster's Prometheus scrape config" in lines
        jobs = {j["job_name"]: j for j in yaml.safe_load(out.read_text())}
        return {job: [c["labels"]["node"] for c in jobs[job]["static_configs"]] for job in jobs}

    cache = tmp_path / "facts"
    lines: list[str] = []
    first = run_playbook(inv, playbook=play, extravars=extra, fact_cache=cache, out=lines.append)
    assert first.rc == 0, "\n".join(lines)
    assert "    cpu-node: " not in "\n".join(lines)  # the skip is said by the role's main, not here
    assert site_cluster_pass(cache) == {"dcgm": ["node-a"], "node": ["cpu-node", "node-a"]}
    # Without that pass's facts (a fresh cache) the skip is not known: cpu-node would be listed
    # as a dcgm-exporter target it does not run.
    assert site_cluster_pass(tmp_path / "fresh")["dcgm"] == ["cpu-node", "node-a"]
