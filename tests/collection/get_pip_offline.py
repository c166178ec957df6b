"""Stand-in for get-pip.py, which ansible-test downloads from ci-files.testing.ansible.com to put
pip into each empty virtual environment it makes (`--venv`); that host is not a package
registry and is out of reach here. Like get-pip.py, it is run by the environment's python with
pip's install arguments (`pip==24.2 --disable-pip-version-check --no-setuptools --no-wheel`):
it puts the pip bundled with Python in (ensurepip, offline), then has that pip install the
pinned packages from the configured index, so the environment ends as get-pip.py leaves it."""

import subprocess
import sys

# get-pip.py's own flags: without them it would also install setuptools and wheel.
_GET_PIP_FLAGS = ("--no-setuptools", "--no-wheel")


def main() -> None:
    args = [a for a in sys.argv[1:] if a not in _GET_PIP_FLAGS]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
    subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
    # ensurepip brings setuptools too (Python < 3.12); get-pip.py --no-setuptools does not.
    if "--no-setuptools" in sys.argv:
        subprocess.check_call([sys.executable, "-m", "pip", "uninstall", "--yes", "setuptools"])


if __name__ == "__main__":
    main()
