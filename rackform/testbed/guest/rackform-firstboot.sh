#!/bin/sh
# Runs early on every boot of a rackform testbed VM (the base image is shared by every VM, so
# anything per-VM comes from the kernel command line that QEMU passes):
#   rackform.priv=ADDR/PREFIX  static address of the private (VM-to-VM) NIC, named priv0
#   rackform.sshkey=TYPE:BASE64  root's authorized SSH key for this testbed
# It also creates the SSH host key the image ships without, so no two VMs share one (ed25519
# only: an RSA key takes half a minute to generate under TCG).
set -eu
for word in $(cat /proc/cmdline); do
  case "$word" in
    rackform.priv=*) priv="${word#rackform.priv=}" ;;
    rackform.sshkey=*) key="${word#rackform.sshkey=}" ;;
  esac
done
if [ -n "${priv:-}" ]; then
  mkdir -p /run/systemd/network
  printf '[Match]\nName=priv0\n\n[Network]\nAddress=%s\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
    "$priv" >/run/systemd/network/20-priv0.network
fi
if [ -n "${key:-}" ]; then
  install -d -m 0700 /root/.ssh
  printf '%s %s rackform-testbed\n' "${key%%:*}" "${key#*:}" >/root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
if [ ! -s /etc/ssh/ssh_host_ed25519_key ]; then
  ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
