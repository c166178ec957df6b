"""`python -m rackform` is the `rackform` command."""

from rackform.cli.main import main

main()
