"""rackform: declare a GPU cluster once, compile it into Pulumi stacks, Ansible roles and an
end-to-end smoke validation."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rackform")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
