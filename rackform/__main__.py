"""`python -m rackform` is the `rackform` command."""

from rackform.cli import main

main()
