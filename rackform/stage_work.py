"""What a stack's Configure and Validate stages run: the Ansible roles' converge and their check
mode, a rolling change and the record of what the nodes run, and the cluster's validation,
imported as the functions they are and handed to the stages' providers by the program, with
the rolling change's input the Configure stage is given.

A stage's provider is kept in the stack's state, pickled, until the resource is next updated,
and `pulumi refresh` and `destroy` run the one the state holds. Releases before this one named
the work by "module:function" strings; `EARLIER` holds each such name with the function it
names today.
"""

from __future__ import annotations

from collections.abc import Callable

from rackform.acceptance.cluster import validate_cluster
from rackform.push.stage import configure, drift
from rackform.rollout.inputs import rollout_input
from rackform.rollout.stage import record, roll

# The keyword arguments of the stages' providers.
CONFIGURE: dict[str, Callable] = {"work": configure, "drift": drift, "roll": roll, "record": record}
VALIDATE: dict[str, Callable] = {"work": validate_cluster}
# What the Configure stage is given to roll a change through Slurm, from the plan.
ROLLOUT_INPUT = rollout_input

EARLIER: dict[str, Callable] = {
    "rackform.push.runner:configure": configure,
    "rackform.push.runner:drift": drift,
    "rackform.rollout.stage:roll": roll,
    "rackform.rollout.stage:record": record,
    "rackform.acceptance.cluster:validate_cluster": validate_cluster,
    # Before the Ansible driver and the validation had their packages of today.
    "rackform.hosts.runner:configure": configure,
    "rackform.hosts.runner:drift": drift,
    "rackform.validation.cluster:validate_cluster": validate_cluster,
}
