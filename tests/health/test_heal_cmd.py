"""`rackform heal` against a real Prometheus (Debian's), backfilled per scenario with
dcgm-exporter and node_exporter series for bare-metal clusters of ten nodes with hyphenated
names: series that relabel half-way and series with gaps stay one healthy GPU; each fault gets
its verdict and action; the budget, the breaker and a blueprint without lifecycle.health keep
heal's hands off; a node without telemetry is unknown; Prometheus that does not answer is exit
3 with nothing judged. Every run is a dry run (acting: test_heal_apply*.py)."""

from __future__ import annotations

import json
import textwrap

import pytest
from blueprint_helpers import rackform
from servers import Gpu, Series, prometheus

from rackform.telemetry import labels as L

pytestmark = pytest.mark.slow

GPUS = 2


def blueprint(
    tmp_path, name: str, hosts: int = 10, health: str | None = "{}", budget: int | None = 1
):
    lines = "\n".join(
        f"      - {{name: {name}-{i:02d}, address: 10.9.{len(name)}.{i}}}"
        for i in range(1, hosts + 1)
    )
    text = (
        textwrap.dedent(f"""\
        name: {name}
        purpose: training
        owner: ops@example.com
        target: {{type: bare_metal, capex_usd_per_gpu: 30000, amortize_months: 36}}
        node_groups:
          - name: hgx-pool
            gpu: H100-SXM
            gpus_per_node: {GPUS}
            hosts:
        """)
        + lines
        + "\nnetwork: {fabric: ethernet}\n"
    )
    if health is not None:
        text += f"lifecycle:\n  health: {health}\n"
        text += f"  max_out_of_service: {budget}\n" if budget is not None else ""
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def ids(cluster: str, node: str, gpu: int | None = None) -> tuple[tuple[str, str], ...]:
    out = (
        (L.CLUSTER, cluster),
        (L.ENVIRONMENT, "default"),
        (L.PURPOSE, "training"),
        (L.NODE, node),
    )
    return out + (((L.GPU, str(gpu)),) if gpu is not None else ())


def gpus(cluster: str, nodes: range, skip: set[str] = frozenset()) -> list[Gpu]:
    """Two GPUs a node reporting for three hours; node 01's GPU 1 relabelled an hour ago (a new
    driver version label) and node 05's with a 20-minute gap an hour ago."""
    out = []
    for i in nodes:
        node = f"{cluster}-{i:02d}"
        if node in skip:
            continue
        for g in range(GPUS):
            if i == 1 and g == 1:
                out += [
                    Gpu(cluster, "default", "training", node, g, 55.0, 9000.0, 180, 61,
                        extra=(("driver_version", "550.54"),)),
                    Gpu(cluster, "default", "training", node, g, 55.0, 9000.0, 60, 0,
                        extra=(("driver_version", "550.90"),)),
                ]  # fmt: skip
            elif i == 5 and g == 0:
                out += [
                    Gpu(cluster, "default", "training", node, g, 55.0, 9000.0, 180, 81),
                    Gpu(cluster, "default", "training", node, g, 55.0, 9000.0, 60, 0),
                ]
            else:
                out.append(Gpu(cluster, "default", "training", node, g, 55.0, 9000.0))
    return out


def xid(cluster: str, node: str, gpu: int, code: int, since: int = 12, until: int = 8) -> Series:
    """The last XID code a GPU saw: `code` from `since` to `until` minutes ago, 0 otherwise."""
    return Series(
        L.XID_ERRORS, ids(cluster, node, gpu), lambda i, t: code if until <= i <= since else 0
    )


def heal(url: str, *files):
    r = rackform("heal", *files, "--prometheus", url, "--json")
    return r, (json.loads(r.stdout) if r.stdout.strip() else None)


def by_node(doc: dict, cluster: int = 0) -> dict[str, dict]:
    return {n["node"]: n for n in doc["clusters"][cluster]["nodes"]}


def test_xids_relabelled_and_gappy_series_and_a_silent_node(tmp_path):
    name = "dc-a"
    series = [
        xid(name, "dc-a-02", 1, 79),
        xid(name, "dc-a-03", 0, 13),
        xid(name, "dc-a-04", 1, 999),
    ]
    series += [
        Series(L.XID_ERRORS, ids(name, f"dc-a-{i:02d}", g), 0.0)
        for i in (1, 5)
        for g in range(GPUS)
    ]
    # dc-a-07's GPU fell off the bus 90 minutes ago, before the 30-minute lookback: healthy now.
    series.append(xid(name, "dc-a-07", 0, 79, since=90, until=80))
    bp = blueprint(tmp_path, name)
    healthy = blueprint(tmp_path, "dc-ok", hosts=5)
    with prometheus(gpus(name, range(1, 11), skip={"dc-a-06"}) + gpus("dc-ok", range(1, 6)),
                    tmp_path / "prom", series=series) as url:  # fmt: skip
        r, doc = heal(url, bp)
        r_ok, doc_ok = heal(url, healthy)
    assert r.returncode == 6, r.stderr
    nodes = by_node(doc)
    # The relabelled GPU, the gappy one and the nodes without trouble: healthy, no action.
    for n in ("dc-a-01", "dc-a-05", "dc-a-07", "dc-a-08", "dc-a-09", "dc-a-10"):
        assert (nodes[n]["verdict"], nodes[n]["action"], nodes[n]["acts"]) == (
            "healthy",
            "none",
            False,
        )
    fell = nodes["dc-a-02"]
    assert (fell["verdict"], fell["action"], fell["acts"]) == ("failed", "reboot", True)
    assert (
        fell["evidence"][0]["detail"]
        == "GPU 1: XID 79 (GPU has fallen off the bus): NVIDIA's RESTART_BM"
    )
    assert fell["evidence"][0]["series"] == L.XID_ERRORS and fell["evidence"][0]["value"] == 79
    app = nodes["dc-a-03"]
    assert (app["verdict"], app["action"], app["acts"]) == ("suspect", "monitor", False)
    unknown = nodes["dc-a-04"]["evidence"][0]
    assert (unknown["action"], unknown["detail"]) == (
        "monitor",
        "GPU 1: XID 999 is not in NVIDIA's catalog as rackform has it: monitor",
    )
    assert doc["warnings"] == [
        "dc-a/dc-a-04: GPU 1: XID 999 is not in NVIDIA's catalog as rackform has it: monitor"
        " (name it in lifecycle.health.actions.xid)"
    ]
    assert "rackform: warning: dc-a/dc-a-04: GPU 1: XID 999" in r.stderr
    silent = nodes["dc-a-06"]
    assert (silent["verdict"], silent["action"], silent["acts"]) == ("unknown", "none", False)
    assert doc["exit"] == {
        "status": 6,
        "reason": "unhealthy: dc-a/dc-a-02, dc-a/dc-a-03, dc-a/dc-a-04",
    }
    # A cluster with nothing wrong: exit 0, not one action.
    assert r_ok.returncode == 0, r_ok.stderr
    assert {(n["verdict"], n["action"]) for n in doc_ok["clusters"][0]["nodes"]} == {
        ("healthy", "none")
    }


def test_memory_storage_fabric_heartbeat_and_pcie_within_the_budget(tmp_path):
    name = "dc-b"
    n = [f"dc-b-{i:02d}" for i in range(11)]  # n[1]..n[10]
    ib, md = (("device", "mlx5_0"), ("port", "1")), (("device", "md127"),)
    series = [
        Series(L.ECC_DBE, ids(name, n[1], 1), lambda i, t: 2.0 if i <= 10 else 0.0),
        Series("node_md_disks_required", ids(name, n[2]) + md, 4.0),
        Series("node_md_disks", ids(name, n[2]) + md + (("state", "active"),), 3.0),
        Series("node_md_disks_required", ids(name, n[7]) + md, 4.0),
        Series("node_md_disks", ids(name, n[7]) + md + (("state", "active"),), 4.0),
        Series("node_infiniband_state_id", ids(name, n[3]) + ib, 1.0),
        Series("node_infiniband_state_id", ids(name, n[8]) + ib, 4.0),
        Series(
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", ids(name, n[5], 0), lambda i, t: (180 - i) * 10.0
        ),
        Series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", ids(name, n[6], 0), lambda i, t: (180 - i) * 0.5),
    ]
    # The job's heartbeat: every node's beats each minute; n[4]'s stopped 20 minutes ago.
    series += [
        Series(L.HEARTBEAT, ids(name, node), lambda i, t, stop=(20 if node == n[4] else 0):
               t - (max(i, stop) - i) * 60)
        for node in n[1:]
    ]  # fmt: skip
    bp = blueprint(tmp_path, name, budget=2)
    with prometheus(gpus(name, range(1, 11)), tmp_path / "prom", series=series) as url:
        r, doc = heal(url, bp)
    assert r.returncode == 6, r.stderr
    nodes = by_node(doc)
    got = {
        k: (v["verdict"], v["action"], v["acts"])
        for k, v in nodes.items()
        if v["verdict"] != "healthy"
    }
    assert got == {
        n[1]: ("failed", "reset", True),  # the most disruptive first
        n[2]: ("failed", "drain", True),  # then by name, while the budget (2) lasts
        n[3]: ("failed", "drain", False),
        n[4]: ("failed", "drain", False),
        n[5]: ("suspect", "monitor", False),
    }, got
    assert "budget (2 of 10 nodes) is used" in nodes[n[3]]["waits"]
    assert (
        nodes[n[1]]["evidence"][0]["detail"] == "GPU 1: uncorrectable ECC errors in the window (2)"
    )
    assert nodes[n[2]]["evidence"][0]["detail"] == (
        "md array md127 is 1 member(s) short of its required drives"
    )
    assert (
        nodes[n[3]]["evidence"][0]["detail"] == "InfiniBand mlx5_0 port 1 is not ACTIVE (state 1)"
    )
    assert nodes[n[4]]["evidence"][0]["detail"].startswith("the job's heartbeat stopped ")
    assert nodes[n[5]]["evidence"][0]["detail"].startswith("GPU 0: 600 PCIe replays an hour")


def test_the_breaker_and_a_blueprint_without_a_policy_keep_heals_hands_off(tmp_path):
    name = "dc-c"
    fallen = [xid(name, f"dc-c-{i:02d}", 0, 79) for i in range(1, 7)]  # 6 of 10 nodes
    storm = blueprint(tmp_path, name, budget=9)
    other = blueprint(tmp_path, "dc-d", hosts=5, health=None)
    with prometheus(gpus(name, range(1, 11)) + gpus("dc-d", range(1, 6)), tmp_path / "prom",
                    series=[*fallen, xid("dc-d", "dc-d-02", 0, 48)]) as url:  # fmt: skip
        r, doc = heal(url, storm)
        r2, doc2 = heal(url, other)
    assert r.returncode == 6
    c = doc["clusters"][0]
    assert c["breaker"]["tripped"] and "6 of 10 nodes look unhealthy at once" in c["breaker"]["why"]
    assert not any(n["acts"] for n in c["nodes"])
    assert {n["waits"] for n in c["nodes"] if n["verdict"] == "failed"} == {
        "the breaker is tripped"
    }
    assert r2.returncode == 6
    d = by_node(doc2)["dc-d-02"]
    assert (d["verdict"], d["action"], d["acts"]) == ("failed", "reset", False)
    assert d["waits"] == "the blueprint declares no lifecycle.health: report only"
    assert doc2["clusters"][0]["policy"] == "default (report only)"


def test_prometheus_that_does_not_answer_judges_nothing(tmp_path):
    from loopback import free_port

    r, doc = heal(f"http://127.0.0.1:{free_port()}", blueprint(tmp_path, "dc-e", hosts=3))
    assert r.returncode == 3, r.stderr
    c = doc["clusters"][0]
    assert "Prometheus at http://127.0.0.1:" in c["error"]
    assert {(n["verdict"], n["acts"]) for n in c["nodes"]} == {("unknown", False)}


def test_an_aws_cluster_s_nodes_are_the_ones_its_telemetry_names(tmp_path):
    """An AWS blueprint lists no instances: the nodes are those with GPU series in the lookback
    (hostnames such as ip-10-0-1-17), each with the group's GPUs; one that stopped reporting is
    unknown, one that reports fewer GPUs than the instance type has is failed."""
    name = "gpu-train-1"
    bp = tmp_path / "aws.yaml"
    bp.write_text(
        textwrap.dedent(f"""\
        name: {name}
        purpose: training
        owner: a@example.com
        target: {{type: aws, region: us-east-1, availability_zone: us-east-1a, ssh_cidrs: [10.0.0.0/16]}}
        node_groups: [{{name: h100-pool, instance_type: p5.48xlarge, count: 3}}]
        network: {{fabric: efa}}
        lifecycle:
          health: {{}}
          max_out_of_service: 1
        """)
    )
    node = "ip-10-0-1-{}".format
    history = [Gpu(name, "default", "training", node(17), g, 60.0) for g in range(8)]
    history += [Gpu(name, "default", "training", node(18), g, 60.0) for g in range(7)]
    history += [Gpu(name, "default", "training", node(19), g, 60.0, end_min=20) for g in range(8)]
    with prometheus(history, tmp_path / "prom") as url:
        r, doc = heal(url, bp)
    assert r.returncode == 6, r.stderr
    nodes = by_node(doc)
    assert list(nodes) == [node(17), node(18), node(19)]
    assert nodes[node(17)]["verdict"] == "healthy" and nodes[node(17)]["group"] == "h100-pool"
    assert (nodes[node(18)]["verdict"], nodes[node(18)]["action"]) == ("failed", "reboot")
    assert nodes[node(18)]["evidence"][0]["detail"].startswith("7 of 8 GPUs report")
    assert (nodes[node(19)]["verdict"], nodes[node(19)]["acts"]) == ("unknown", False)


def cpu_blueprint(
    tmp_path, name: str, hosts: dict[str, str], actions: str, budget: int, mount: str
):
    """A bare-metal cluster of CPU nodes (`hosts`: name -> address) with its checkpoint
    filesystem at `mount`, heal's `actions` (YAML flow mapping) and out-of-service `budget`."""
    bp = tmp_path / f"{name}.yaml"
    listed = "\n".join(f"      - {{name: {h}, address: {a}}}" for h, a in hosts.items())
    bp.write_text(
        textwrap.dedent(f"""\
        name: {name}
        purpose: training
        owner: ops@example.com
        target: {{type: bare_metal}}
        node_groups:
          - name: cpu-pool
            hosts:
        """)
        + listed
        + textwrap.dedent(f"""
        network: {{fabric: ethernet}}
        storage: {{checkpoint: {{mount: {mount}}}}}
        lifecycle:
          health: {{actions: {actions}}}
          max_out_of_service: {budget}
        """)
    )
    return bp


def test_a_cluster_without_gpus_is_judged_on_node_exporter(tmp_path):
    """CPU nodes (the testbed's VMs' kind) are seen by node_exporter and judged on its series;
    a GPU node with node_exporter alone is still unknown: its GPUs are what it is for."""
    name = "cpu-farm"
    hosts = {f"{name}-{i}": f"10.7.0.{i}" for i in range(1, 6)}
    bp = cpu_blueprint(tmp_path, name, hosts, "{storage: reboot}", 1, "/mnt/ckpt-a")
    boot = [
        # cpu-farm-4's exporter stopped 20 minutes ago: unknown.
        Series("node_boot_time_seconds", ids(name, f"{name}-{i}"), 1.7e9,
               start_min=180, end_min=20 if i == 4 else 0)
        for i in range(1, 6)
    ]  # fmt: skip
    ro = [
        Series(f"node_filesystem_{what}", (*ids(name, f"{name}-{i}"), ("mountpoint", mount)), v)
        for what, i, mount, v in (
            ("readonly", 1, "/mnt/ckpt-a", 0.0),
            ("readonly", 2, "/mnt/ckpt-a", 1.0),
            ("readonly", 3, "/boot", 1.0),
            ("device_error", 1, "/boot", 1.0),
            # cpu-farm-5's array cannot be read at all (statfs fails: node_exporter says
            # neither read-only nor writable); a gap in the series as it comes and goes.
            ("device_error", 5, "/mnt/ckpt-a", lambda m, t: None if 3 <= m <= 4 else 1.0),
        )
    ]
    # A GPU cluster whose node has node_exporter but no GPU series.
    gpu_bp = blueprint(tmp_path, "gpu-b", hosts=2)
    gpu_boot = [Series("node_boot_time_seconds", ids("gpu-b", "gpu-b-02"), 1.7e9)]
    with prometheus(
        gpus("gpu-b", range(1, 2)), tmp_path / "prom", series=[*boot, *ro, *gpu_boot]
    ) as url:
        r, doc = heal(url, bp)
        _, doc2 = heal(url, gpu_bp)
    assert r.returncode == 6, r.stderr
    got = {n: (v["verdict"], v["action"]) for n, v in by_node(doc).items()}
    assert got == {
        f"{name}-1": ("healthy", "none"),
        f"{name}-2": ("failed", "reboot"),
        f"{name}-3": ("healthy", "none"),  # read-only, but not the checkpoint filesystem
        f"{name}-4": ("unknown", "none"),
        f"{name}-5": ("failed", "reboot"),
    }, got
    assert by_node(doc)[f"{name}-2"]["evidence"][0]["detail"] == (
        "the checkpoint filesystem /mnt/ckpt-a is read-only"
    )
    assert by_node(doc)[f"{name}-5"]["evidence"][0]["detail"] == (
        "the checkpoint filesystem /mnt/ckpt-a cannot be read (node_exporter's statfs fails)"
    )
    assert by_node(doc2)["gpu-b-02"]["verdict"] == "unknown", doc2
    assert by_node(doc2)["gpu-b-01"]["verdict"] == "healthy", doc2


def test_the_slurm_health_checks_failures_reach_heal_through_node_exporter(tmp_path):
    """What the slurm role's health check writes for node_exporter's textfile collector: a
    failed checkpoint mount is a storage fault (a RAID0 array with a member gone, which md still
    calls active), another failed check a validation fault; a check that passed again (its
    series gone since) counts for nothing, whatever its last value."""
    name = "dc-h"
    failed = "rackform_node_check_failed"

    def check(node: str, what: str, until: int = 0) -> Series:
        labels = (*ids(name, f"{name}-{node}"), ("check", what))
        return Series(failed, labels, 1.0, start_min=60, end_min=until)

    series = [
        check("02", "checkpoint_mount"),
        check("03", "gpu_count"),
        check("04", "nvlink", until=20),  # it passed again 20 minutes ago
    ]
    with prometheus(gpus(name, range(1, 6)), tmp_path / "prom", series=series) as url:
        r, doc = heal(url, blueprint(tmp_path, name, hosts=5, budget=2))
    assert r.returncode == 6, r.stderr
    got = {n: (v["verdict"], v["action"]) for n, v in by_node(doc).items()}
    assert got == {
        "dc-h-01": ("healthy", "none"),
        "dc-h-02": ("failed", "drain"),
        "dc-h-03": ("failed", "drain"),
        "dc-h-04": ("healthy", "none"),
        "dc-h-05": ("healthy", "none"),
    }, got
    e2, e3 = (by_node(doc)[f"dc-h-0{i}"]["evidence"][0] for i in (2, 3))
    assert (e2["fault"], e2["detail"]) == (
        "storage", "Slurm's health check fails checkpoint_mount on the node",
    )  # fmt: skip
    assert (e3["fault"], e3["value"]) == ("validation", "gpu_count")
