#!/usr/bin/env bash
# Sets up rackform on a fresh Debian/Ubuntu machine: system packages, a virtualenv in .venv
# and the package with its extras. Idempotent: a second run only checks.
#
#   bash scripts/setup.sh          runtime: validate, compile, plan, configure
#   bash scripts/setup.sh --test   also the test toolchain, the VM testbed's packages and its
#                                  cached base image
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

# Debian packages. Runtime needs an ssh client (ansible) and python venv support;
# the test suite also boots Debian VMs under QEMU (see rackform/testbed).
apt_pkgs=(openssh-client python3-venv)
# rackform diff and promote read and commit the blueprints' git repository.
apt_pkgs+=(git)
if ((want_test)); then
  # The VM testbed (rackform/testbed): QEMU and qemu-img, debootstrap with Debian's archive
  # keyring to verify what it fetches, mkfs.ext4 -d to make the image without loop mounts.
  # debootstrap also makes the Debian 13 root the topology/block tests run Slurm 24.11 in
  # (rackform/testbed/slurm_root.py, built by the tests themselves into the cache).
  apt_pkgs+=(qemu-system-x86 qemu-utils debootstrap debian-archive-keyring e2fsprogs)
  # The smoke tests: fio for the storage ceiling, iproute2 for a loopback-only netns.
  apt_pkgs+=(fio iproute2)
  # The dcgm role's scrape config is loaded by a real Prometheus on loopback (promtool with it).
  # Debian's package does not start the service where there is no init system to start it.
  apt_pkgs+=(prometheus)
  # rackform reap's notify action is tested against a real Alertmanager on loopback (the tests
  # start their own on free ports with a temp data dir, never the packaged service).
  apt_pkgs+=(prometheus-alertmanager)
  # The dcgm role's node_exporter arguments are run by the package the role installs (its
  # filesystem collector over a stand-in mount table), never the packaged service.
  apt_pkgs+=(prometheus-node-exporter)
  # The Slurm operator tests (reap's busy check, drain, job records) run Debian's slurmctld and
  # two slurmd on loopback in the foreground (tests/slurm_local.py); the package's services are
  # not started where there is no init system, and the tests never use them.
  apt_pkgs+=(slurm-wlm)
  # The fairness tests run MariaDB and slurmdbd the same way (tests/slurm_accounting_local.py:
  # a fresh data directory in a temp dir, loopback ports), never the packaged services.
  apt_pkgs+=(mariadb-server slurmdbd)
  # The documentation site is opened in a real headless browser (tests/docs/test_docs_browser.py):
  # the front page, the blueprint reference and a guide render with no console error.
  apt_pkgs+=(chromium)
fi
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py=${PYTHON:-python3}
images_pid=""
if ((want_test)); then
  # The end-to-end test bakes its node image on a VM booted from the cached Debian base image;
  # build that here, with the package repository the tests serve, rather than inside the
  # test's time budget (a no-op once cached). With this Python's standard library only, in the
  # background while pip fills the virtualenv: the two overlap (debootstrap is mostly downloads
  # and dpkg, pip mostly unpacking).
  images_log=$(mktemp -t rackform-images.XXXXXX)
  "$py" -m rackform.testbed.prepare >"$images_log" 2>&1 &
  images_pid=$!
  trap '[[ -z $images_pid ]] || kill "$images_pid" 2>/dev/null; rm -f "$images_log"' EXIT
fi
if [[ ! -x .venv/bin/python ]]; then
  "$py" -m venv .venv
fi
extras="deploy,report"
((want_test)) && extras="deploy,report,test"
# pip's resolver is a no-op when everything is already installed at the right versions. Its
# chatter goes to a log that is shown only when it fails.
log=.venv/setup.log
pip_install() {
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" | tail -n 40 >&2
    echo "setup: pip install $* failed (full log: $log)" >&2
    exit 1
  fi
}
pip_install --upgrade pip
pip_install -e ".[${extras}]"
if [[ -n $images_pid ]]; then
  if ! wait "$images_pid"; then
    images_pid=""
    cat "$images_log" >&2
    echo "setup: building the testbed's images failed" >&2
    exit 1
  fi
  images_pid=""
  cat "$images_log"
fi
echo "setup: ready (.venv, extras: ${extras})"
