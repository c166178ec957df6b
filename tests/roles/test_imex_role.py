"""The imex role without a GPU or an NVL72 rack (none here): its nodes_config.cfg rendered by
Ansible's own templating, its preflight's expressions on good and fooling addresses, the package
it derives from the loaded driver's version, its argument specs through Ansible's validator, and
the site playbook's grouping, which gives the role no host unless the plan names a domain (so the
VM e2e, whose nodes have none, runs none of it). What a real rack does is in
docs/operations/limits.md ("not yet run")."""

from __future__ import annotations

import base64

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from gpu_collection import ROLES_DIR, SITE
from role_vars import render

ROLE = ROLES_DIR / "imex"
DOMAIN = ["10.40.1.11", "10.40.1.12", "10.40.1.13"]


def nodes_config(members: list[str]) -> str:
    text = (ROLE / "templates" / "nodes_config.cfg.j2").read_text(encoding="utf-8")
    templar = Templar(loader=DataLoader(), variables={"imex_domain_members": members})
    # Ansible's template module renders with trim_blocks on.
    return templar.copy_with_new_env(trim_blocks=True).template(trust_as_template(text))


def test_nodes_config_lists_the_domains_trays_one_per_line_in_order():
    assert nodes_config(DOMAIN) == "10.40.1.11\n10.40.1.12\n10.40.1.13\n"
    # Another domain's trays are another list: nothing in the file comes from elsewhere.
    other = ["10.40.2.11", "10.40.2.12"]
    assert nodes_config(other) == "10.40.2.11\n10.40.2.12\n"
    text = (ROLE / "templates" / "nodes_config.cfg.j2").read_text(encoding="utf-8")
    assert "hostvars" not in text and "groups" not in text


def bad(members: list) -> list:
    return render("imex", "_imex_bad_members", {"imex_domain_members": members}, ["t1"])


@pytest.mark.parametrize(
    "address",
    ["10.40.1.256", "10.40.1", "tray-a1", "10.40.1.11 ", " 10.40.1.11", "10.40.1.11;reboot",
     "fd00::1; ls", "", "1.2.3.4.5", "10.040.1.1", "fd00:1", "::g"],
)  # fmt: skip
def test_an_address_that_is_not_an_ip_address_is_refused(address):
    assert bad(["10.40.1.11", address]) == [address]


def test_ipv4_and_ipv6_addresses_are_taken():
    good = ["10.40.1.11", "192.168.255.254", "0.0.0.0", "fd00::1", "2001:db8::a:1", "::1"]
    assert bad(good) == []


@pytest.mark.parametrize(
    ("members", "repeats"),
    [(DOMAIN, False), ([*DOMAIN, DOMAIN[0]], True), (["fd00::a", "FD00::A"], True)],
)
def test_a_tray_listed_twice_is_refused(members, repeats):
    got = render("imex", "_imex_repeats", {"imex_domain_members": members}, ["t1"])
    assert bool(got) is repeats


def test_a_host_without_a_domain_is_skipped_saying_why():
    why = render("imex", "_imex_skip_reason", {"imex_domain_members": []}, ["h100-a"])
    assert "h100-a is not a tray of a rack-scale NVLink domain" in why
    assert render("imex", "_imex_skip_reason", {"imex_domain_members": DOMAIN}, ["t1"]) == ""


@pytest.mark.parametrize(
    ("own", "member"),
    [(["10.40.1.12", "192.168.0.5"], True), (["10.40.2.11"], False), ([], False)],
)
def test_a_tray_must_be_one_of_its_domains_members(own, member):
    preflight = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text(encoding="utf-8"))
    (task,) = [t for t in preflight if "its domain's members" in t["name"]]
    (that,) = task["ansible.builtin.assert"]["that"]
    facts = {"ansible_facts": {"all_ipv4_addresses": own, "all_ipv6_addresses": []}}
    got = render("imex", that, {"imex_domain_members": DOMAIN}, ["t2"], **facts)
    assert bool(got) is member


def test_the_package_is_the_loaded_drivers_branch_and_version():
    loaded = {"content": base64.b64encode(b"570.133.20\n").decode()}
    variables = {"imex_domain_members": DOMAIN, "_imex_module_version": loaded}
    assert render("imex", "_imex_driver_version", variables, ["t1"]) == "570.133.20"
    assert render("imex", "_imex_package", variables, ["t1"]) == "nvidia-imex-570"
    install = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text(encoding="utf-8"))
    (apt,) = [t for t in install if "ansible.builtin.apt" in t]
    assert apt["ansible.builtin.apt"]["name"] == "{{ _imex_package }}={{ _imex_driver_version }}-*"


def spec() -> dict:
    doc = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    keep = ("type", "elements", "default")
    opts = doc["argument_specs"]["main"]["options"]
    return {n: {k: v for k, v in o.items() if k in keep} for n, o in opts.items()}


def test_the_argument_specs_take_a_list_of_addresses_and_refuse_other_shapes():
    validator = ArgumentSpecValidator(spec())
    assert not validator.validate({"imex_domain_members": DOMAIN}).error_messages
    assert validator.validate({"imex_domain_members": {"a": 1}}).error_messages
    assert validator.validate({"imex_cmd_port": "fifty"}).error_messages


def test_the_site_playbook_runs_imex_only_where_the_plan_names_a_domain():
    plays = yaml.safe_load(SITE.read_text(encoding="utf-8"))
    (group,) = [
        t
        for t in plays[0]["tasks"]
        if t.get("ansible.builtin.group_by", {}).get("key") == "rackform_imex"
    ]
    (play,) = [
        p for p in plays if any(r["role"] == "rackform.gpu.imex" for r in p.get("roles") or [])
    ]
    assert play["hosts"] == "gpu_nodes:&rackform_imex"
    names = [p["name"] for p in plays]
    assert names.index(play["name"]) > names.index("Converge the GPU nodes")  # after the driver

    def grouped(variables: dict) -> bool:
        templar = Templar(loader=DataLoader(), variables=variables)
        return bool(templar.template(trust_as_template("{{ " + group["when"] + " }}")))

    assert grouped({}) is False  # the e2e's nodes: the plan gives no domain
    assert grouped({"imex_domain_members": []}) is False
    assert grouped({"imex_domain_members": DOMAIN}) is True
