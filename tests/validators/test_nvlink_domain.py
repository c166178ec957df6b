"""The rack-scale NVLink domain checks (validators/nvlink_domain.py) on outputs in the documented
formats (tests/validators/recorded/: `nvidia-smi -q` of a GB200 tray, `nvidia-imex-ctl -N` of an
18-tray domain; this machine has no GPU and no rack), and the cases meant to fool them: a tray in
another clique, a GPU still "In Progress", a tray missing from IMEX's list, spacing and lines
nobody documented. Through the host checks' own command line too, with the two commands as
scripts on PATH that print those outputs (a GPU tray is the only other way to run them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from validators import hostcheck
from validators.nvlink_domain import (
    fabric_check,
    identity,
    imex_check,
    parse_fabric,
    parse_imex,
)
from validators.report import FAIL, PASS

RECORDED = Path(__file__).parent / "recorded"
CLUSTER = "5b0c4f1e-8d3a-4c7e-9a2b-1f6e3d8c7a90"
TRAY = f"cluster {CLUSTER} clique 32766"
MEMBERS = [f"10.40.1.{11 + k}" for k in range(18)]


def recorded(name: str) -> str:
    """The file without its leading comment lines (its source)."""
    lines = (RECORDED / name).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


SMI = recorded("nvidia-smi-q-gb200-tray.txt")
IMEX = recorded("nvidia-imex-ctl-N-nvl72.txt")


def gpu_section(text: str, bus: str) -> tuple[int, int]:
    """Where one GPU's section of `nvidia-smi -q` starts and ends."""
    start = text.index(f"GPU {bus}\n")
    end = text.find("\nGPU ", start + 1)
    return start, len(text) if end < 0 else end


def on_gpu(text: str, bus: str, old: str, new: str) -> str:
    start, end = gpu_section(text, bus)
    section = text[start:end]
    assert old in section
    return text[:start] + section.replace(old, new) + text[end:]


# ------------------------------------------------------------------------ gpu_fabric


def test_a_registered_tray_passes_measuring_its_cluster_and_clique():
    gpus = parse_fabric(SMI)
    assert [g.gpu for g in gpus] == [
        "00000008:01:00.0",
        "00000009:01:00.0",
        "00000018:01:00.0",
        "00000019:01:00.0",
    ]
    c = fabric_check(gpus, "tray-a1", expect_gpus=4)
    assert (c.status, c.measured, c.node) == (PASS, TRAY, "tray-a1")


def test_a_gpu_still_in_progress_fails_naming_it():
    text = on_gpu(SMI, "00000018:01:00.0", ": Completed", ": In Progress")
    text = on_gpu(text, "00000018:01:00.0", ": Success", ": N/A")
    c = fabric_check(parse_fabric(text), "tray-a1")
    assert c.status == FAIL and c.measured == "3 of 4 GPUs registered"
    assert "00000018:01:00.0: state In Progress, status N/A" in c.detail


def test_completed_with_a_failed_status_is_no_registration():
    # NVML: the status is to be read only once the state is complete, and then it must be success.
    text = on_gpu(SMI, "00000009:01:00.0", ": Success", ": NVML_ERROR_UNKNOWN")
    c = fabric_check(parse_fabric(text))
    assert c.status == FAIL and "status NVML_ERROR_UNKNOWN" in c.detail


def test_a_gpu_in_another_clique_within_the_tray_fails():
    text = on_gpu(SMI, "00000019:01:00.0", "CliqueId                                   : 32766",
                  "CliqueId                                   : 4")  # fmt: skip
    c = fabric_check(parse_fabric(text))
    assert c.status == FAIL and "2 cliques" in c.detail and "00000019:01:00.0" in c.detail


def test_a_gpu_without_a_cluster_or_fabric_section_fails():
    text = on_gpu(SMI, "00000008:01:00.0", CLUSTER, "N/A")
    c = fabric_check(parse_fabric(text))
    assert c.status == FAIL and "cluster N/A" in c.detail
    start, end = gpu_section(SMI, "00000009:01:00.0")
    section = SMI[start:end]
    cut = section[: section.index("    Fabric")] + section[section.index("    Processes") :]
    c = fabric_check(parse_fabric(SMI[:start] + cut + SMI[end:]))
    assert c.status == FAIL and "00000009:01:00.0: state missing" in c.detail


def test_fewer_gpus_than_expected_or_none_fail():
    assert fabric_check(parse_fabric(SMI), expect_gpus=8).status == FAIL
    c = fabric_check(parse_fabric("No devices were found\n"))
    assert c.status == FAIL and "no GPU" in c.detail


def test_spacing_and_unknown_lines_change_nothing():
    # CRLF endings, tabs and trailing spaces, a field a later driver adds at the Fabric level
    # and one deeper: the four fields are still read, and nothing else.
    text = SMI.replace("\n", "  \r\n").replace(": Completed", ":\tCompleted")
    text = text.replace(
        "        ClusterUUID", "        Partition Id                               : 0x7ffe\r\n"
        "        ClusterUUID",
    )  # fmt: skip
    text = text.replace(
        "            Summary", "            Some Future Field : State\r\n            Summary"
    )
    gpus = parse_fabric(text)
    assert len(gpus) == 4 and all(g.state == "Completed" for g in gpus)
    assert fabric_check(gpus).measured == TRAY


def test_the_clique_measured_on_a_tray_is_what_the_domain_compares():
    gpus = parse_fabric(SMI)
    assert {identity(g) for g in gpus} == {TRAY}


# ------------------------------------------------------------------------ imex_domain


def test_an_up_domain_passes():
    got = parse_imex(IMEX)
    assert [a for a, _ in got.nodes] == MEMBERS and got.state == "UP"
    assert len(got.links) == 18 * 18
    c = imex_check(IMEX, MEMBERS, "tray-a1")
    assert c.status == PASS and c.measured == "18 of 18 READY, Domain State UP"


def test_a_tray_missing_from_imexs_list_fails_naming_it():
    text = "".join(ln for ln in IMEX.splitlines(True) if "- 10.40.1.20 " not in ln)
    c = imex_check(text, MEMBERS)
    assert c.status == FAIL and "not in IMEX's list: 10.40.1.20" in c.detail


def test_a_tray_of_another_domain_in_the_list_fails():
    c = imex_check(IMEX, MEMBERS[:-1])
    assert c.status == FAIL and "listed but not of this domain: 10.40.1.28" in c.detail


def test_a_tray_not_ready_a_link_down_or_the_domain_down_fail():
    text = IMEX.replace("10.40.1.15      - READY", "10.40.1.15      - UNAVAILABLE")
    c = imex_check(text, MEMBERS)
    assert c.status == FAIL and "not READY: 10.40.1.15 UNAVAILABLE" in c.detail
    rows = IMEX.splitlines(True)
    (i,) = [k for k, ln in enumerate(rows) if ln.split()[:1] == ["3"] and "C" in ln]
    cells = rows[i].split()
    cells[5] = "N"  # node 3 never connected to node 4 (column 4)
    rows[i] = "       3        " + "   ".join(cells[1:]) + "\n"
    c = imex_check("".join(rows), MEMBERS)
    assert c.status == FAIL and "10.40.1.14 to 10.40.1.15 (N)" in c.detail
    c = imex_check(IMEX.replace("Domain State: UP", "Domain State: DOWN"), MEMBERS)
    assert c.status == FAIL and "Domain State DOWN" in c.detail
    c = imex_check(IMEX.replace("Domain State: UP", ""), MEMBERS)
    assert c.status == FAIL and "Domain State missing" in c.detail


def test_spacing_unknown_lines_and_host_names_change_nothing():
    text = "IMEX version 570.133.20\n\n" + IMEX.replace("\n", " \t\n")
    text = text.replace("Domain State: UP", "Domain State:    UP   ")
    text = text.replace("- 10.40.1.11      - READY", "-   10.40.1.11   -   tray-a01   -   READY")
    text = text.replace("Nodes:", "Nodes:\nSome line a later version prints: 3")
    c = imex_check(text, MEMBERS)
    assert c.status == PASS, c.detail


def test_no_answer_from_nvidia_imex_ctl_fails_saying_why():
    c = imex_check(None, MEMBERS, why="nvidia-imex-ctl -N exited 1: connection refused")
    assert c.status == FAIL and "connection refused" in c.detail


# ------------------------------------------------------------------------ through hostcheck


def fake_tools(tmp_path: Path, smi: str, imex: str, imex_rc: int = 0) -> dict[str, str]:
    """nvidia-smi and nvidia-imex-ctl as scripts printing the outputs (stand-ins for a GPU
    tray's commands), first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for exe, text, rc, argv in (
        ("nvidia-smi", smi, 0, "-q"),
        ("nvidia-imex-ctl", imex, imex_rc, "-N"),
    ):
        (tmp_path / f"{exe}.out").write_text(text)
        script = bin_dir / exe
        script.write_text(
            f'#!/bin/sh\n[ "$*" = "{argv}" ] || {{ echo "unexpected: $*" >&2; exit 2; }}\n'
            f'cat "{tmp_path / f"{exe}.out"}"\nexit {rc}\n'
        )
        script.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def run_hostcheck(tmp_path, monkeypatch, env, members=MEMBERS) -> dict[str, dict]:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "host.json"
    argv = ["--quick", "--no-table", "--json", str(out), "--node", "tray-a1"]
    hostcheck.main([*argv, "--expect-gpus", "4", "--imex-members", ",".join(members)])
    return {c["name"]: c for c in json.loads(out.read_text())["checks"]}


def test_the_host_checks_run_both_commands_on_a_tray(tmp_path, monkeypatch):
    got = run_hostcheck(tmp_path, monkeypatch, fake_tools(tmp_path, SMI, IMEX))
    assert got["gpu_fabric"]["status"] == PASS and got["gpu_fabric"]["measured"] == TRAY
    assert got["imex_domain"]["status"] == PASS


def test_the_host_checks_say_why_imex_did_not_answer(tmp_path, monkeypatch):
    env = fake_tools(tmp_path, SMI, "connection refused\n", imex_rc=1)
    got = run_hostcheck(tmp_path, monkeypatch, env)
    assert got["imex_domain"]["status"] == FAIL
    assert "nvidia-imex-ctl -N exited 1: connection refused" in got["imex_domain"]["detail"]


@pytest.mark.parametrize("members", [[]])
def test_a_node_of_no_rack_scale_domain_gets_neither_check(tmp_path, monkeypatch, members):
    got = run_hostcheck(tmp_path, monkeypatch, {}, members)
    assert "gpu_fabric" not in got and "imex_domain" not in got
