"""A local VM testbed: Debian VMs under QEMU with emulated NVMe drives, for real role tests."""
