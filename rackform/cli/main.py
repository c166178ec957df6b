"""The `rackform` command line: every command registered on the app, and the boundary where an
unexpected error becomes one line (exit 1) instead of a traceback."""

from __future__ import annotations

import os
import sys

# Each command module adds its commands to `app` when imported.
from rackform.cli import (  # noqa: F401
    alerts_cmd,
    boot_cmd,
    compile_cmd,
    configure_cmd,
    dashboards_cmd,
    data_cmd,
    diff_cmd,
    drift_cmd,
    goodput_cmd,
    heal_cmd,
    image_cmd,
    init_cmd,
    jobs_cmd,
    metrics_cmd,
    plan_cmd,
    promote_cmd,
    reap_cmd,
    report_cmd,
    schema_cmd,
    smoke_cmd,
    snooze_cmd,
    stack_cmd,
    status_cmd,
    testbed_cmd,
    validate_cmd,
)
from rackform.cli.app import app


def main() -> None:
    """Entry point: user mistakes exit 2 with one line each; anything else is an internal
    failure (exit 1) whose traceback is shown only with RACKFORM_DEBUG=1."""
    try:
        app()
    except SystemExit:
        raise
    except Exception as exc:  # the boundary: no traceback for the user unless asked
        if os.environ.get("RACKFORM_DEBUG"):
            raise
        print(f"rackform: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("rackform: rerun with RACKFORM_DEBUG=1 for the traceback", file=sys.stderr)
        sys.exit(1)
