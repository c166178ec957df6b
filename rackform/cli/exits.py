"""Every command's exit statuses, as data: the CLI reference is generated from this table and
a docs test checks that each status a command module's code can exit with is here.

Keys are the command as typed after `rackform`; `"*"` is a status the command passes through
from a tool it wraps (its meaning says which)."""

from __future__ import annotations

# The boundary (the CLI's `main`): any unexpected error is one line and exit 1.
INTERNAL = "an internal failure: one line; RACKFORM_DEBUG=1 shows the traceback"
INVALID = "a user mistake (invalid blueprint, bad option, unwaived preflight error): one line per problem, nothing done"

EXITS: dict[str, dict[int | str, str]] = {
    "validate": {0: "every file valid", 1: INTERNAL, 2: INVALID},
    "schema": {0: "printed", 1: INTERNAL},
    "goodput": {
        0: "simulated",
        1: INTERNAL,
        2: INVALID
        + "; or not a training blueprint, a --evidence file that is not the cluster's statement",
    },
    "compile": {0: "written", 1: INTERNAL, 2: INVALID + "; nothing written"},
    "plan": {
        0: "planned",
        1: INTERNAL + "; or Pulumi (the deploy extra) is not installed",
        2: INVALID + "; a blocked plan shows the findings and the cost, no resources",
    },
    "init": {
        0: "written",
        1: INTERNAL,
        2: "nothing written: a file exists, DIR is a file or not writable, an unknown --target / --purpose",
    },
    "preview": {
        "*": "Pulumi's exit status (of the data tier's stack's preview, then the cluster's)",
        1: INTERNAL + "; or the deploy extra is not installed",
        2: INVALID
        + "; or the Pulumi CLI is missing, or the cluster's stack still holds its data tier (`rackform data move`)",
    },
    "up": {
        "*": "Pulumi's exit status (of the data tier's stack's update, the stack's, or the update that records the wait for the nodes configured at boot)",
        1: INTERNAL + "; or the deploy extra is not installed",
        2: INVALID
        + "; or the Pulumi CLI is missing, promotion's gate refuses, listed nodes configured at boot without --boot-bind (checked first) or with one it cannot listen on, the cluster's stack still holds its data tier (`rackform data move`), or what the data tier's stack lacks could not be looked for in the cloud (or two resources carry its tags)",
        3: "not validated: some node configured at boot failed, ran another artifact or did not configure by --boot-deadline (each named, with what to do); the stack's validation records it",
    },
    "image build": {
        "*": "Pulumi's exit status (a failed build: the nodes keep their image)",
        1: INTERNAL + "; or the deploy extra is not installed",
        2: INVALID
        + "; or the blueprint bakes no image, its target builds none yet, or the Pulumi CLI is missing",
    },
    "boot serve": {
        0: "every listed node reported and passed",
        1: INTERNAL + "; or the deploy extra is not installed",
        2: INVALID
        + "; or the blueprint lists no hosts, an unknown --group, a wildcard --bind without --url, an address it cannot listen on",
        3: "not validated: some node failed, ran another artifact or did not report by the deadline (each named, with what to do)",
    },
    "destroy": {
        "*": "Pulumi's exit status (of the cluster's stack's destroy; with --data, then of the data tier's stack's update and destroy)",
        1: INTERNAL + "; or the deploy extra is not installed, or not confirmed (without --yes)",
        2: "invalid input, or the Pulumi CLI is missing (a preflight error does not refuse destroy), --data without a data tier of its own, or the cluster's stack still holds its data tier (`rackform data move`)",
    },
    "data move": {
        0: "listed (a dry run), or moved",
        "*": "`pulumi state move`'s exit status",
        1: INTERNAL + "; or the deploy extra is not installed",
        2: INVALID
        + "; or the Pulumi CLI is missing, no data tier of its own, no stack or nothing to move, or the data tier's stack already holds a piece",
    },
    "configure": {
        0: "every host configured (--rolling: the rollout done, rolled back or abandoned)",
        "*": "ansible-playbook's exit status when it fails (1 if it gives none), naming host, role and task",
        1: INTERNAL + "; or the deploy extra is not installed",
        2: INVALID
        + "; or (--rolling) no scheduler, another rollout stopped, or nothing to roll back",
        3: "--rolling: another run holds the stack's rollout lock",
        4: "--rolling: the rollout stopped (a batch failed, or the out-of-service budget is used); run again to resume",
    },
    "status": {
        0: "the nodes' states read",
        1: INTERNAL,
        2: INVALID + "; or the blueprint declares no scheduler",
        3: "Slurm could not be read on the controller (the records are still shown)",
    },
    "smoke": {
        0: "no check failed (not-run checks do not fail a run)",
        1: "a check failed; or torch is not installed here, or validators/ is missing (internal)",
        2: INVALID + "; or something the job needs is missing",
    },
    "diff": {
        0: "no change brings a new unwaived preflight error",
        1: "a change brings a new unwaived preflight error (the check fails)",
        2: INVALID + "; or a revision or path that does not resolve",
    },
    "promote": {
        0: "promoted, or already recorded (a no-op)",
        1: INTERNAL,
        2: "refused: the repository is left as it was, one line",
    },
    "drift": {
        0: "no drift",
        1: INTERNAL,
        2: "bad input; the Pulumi CLI missing for the resource level; or, for the host level, "
        "stack-created nodes that cannot be listed or of which none runs",
        3: "drift: each item printed, with whether `rackform configure` repairs it",
    },
    "reap": {
        0: "every cluster measured, every action or warning due succeeded",
        1: INTERNAL,
        2: "bad input, nothing done",
        3: "Prometheus unreachable, refusing the credentials, too slow or answering garbage: nothing decided",
        4: "an action or warning failed on some cluster or host",
        5: "some cluster is unknown (missing metrics, a failed live read) or locked; the others handled",
    },
    "heal": {
        0: "every node of every cluster healthy",
        1: INTERNAL,
        2: "bad input, nothing done",
        3: "Prometheus could not answer for some cluster: nothing judged there",
        5: "some node reports no telemetry (unknown, never acted on); the rest healthy",
        6: "some node is suspect or failed (its action in the output)",
    },
    "snooze": {
        0: "snoozed everywhere asked",
        1: INTERNAL,
        2: "bad input",
        4: "the target's tags could not be written (the state directory's snooze stands)",
    },
    "alerts": {0: "written", 1: INTERNAL, 2: INVALID},
    "metrics": {
        0: "written (lines of a log that cannot be read named and skipped)",
        1: INTERNAL,
        2: INVALID + "; or the file cannot be written there",
    },
    "dashboards": {
        0: "written",
        1: INTERNAL + "; or the report extra is not installed",
        2: "the directory cannot be written",
    },
    "report": {
        0: "written (each part whose input was not given left out, saying so)",
        1: INTERNAL + "; or the report extra is not installed",
        2: INVALID
        + "; or a jobs or goodput file that cannot be read, or the page cannot be written",
        3: "Prometheus unreachable, refusing the credentials, too slow or answering garbage: nothing written",
    },
    "jobs": {
        0: "reported",
        1: INTERNAL,
        2: "bad input (a line that is no record, named by file and line)",
        3: "the records could not be read from the controller",
    },
    "testbed up": {
        0: "the VMs are up",
        1: "a VM failed to start",
        2: "bad input (a testbed error)",
    },
    "testbed image": {0: "the image is cached", 1: "the image could not be made", 2: "bad input"},
    "testbed freeze": {
        0: "frozen, and the VMs booted again",
        1: INTERNAL,
        2: "no testbed, a name that is no plain word, or a VM that did not come back",
    },
    "testbed restore": {
        0: "restored, and the VMs booted",
        1: INTERNAL,
        2: "no testbed, no state frozen under that name, or a VM that did not come back",
    },
    "testbed down": {0: "stopped", 1: INTERNAL, 2: "bad input"},
}
