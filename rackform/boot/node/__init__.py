"""Runs on a node at first boot, as root, from the unpacked bootstrap artifact: installs
ansible-core in a virtualenv, runs the site playbook over `localhost` with the node group's
configuration variables, checks the node as a serving node (`validators.serving`, from the
validators the artifact's collection carries) and reports the outcome.

Standard library only, and Python 3.10 (Ubuntu 22.04's): nothing of rackform is installed on
the node, which gets this package's modules as one file, `node_bootstrap.py`. On AWS it then
tags the instance `rackform:configured=<artifact sha256>` (the cluster's inventory lists only
configured nodes) and completes the autoscaling group's launch lifecycle hook, CONTINUE or
ABANDON, so a node reports healthy only once configured and checked.

Reporting: where the user data wrote `REPORT_TO` (a node that has a controller to report to, as
on bare metal), the outcome goes to the controller's boot server at the end, configured or
failed with the error and the checks, tried again with a growing wait while the server cannot
be reached; a report that cannot be sent is logged and changes nothing of the outcome. Without
the file (an autoscaling group's nodes on AWS) nothing is posted. The file holds the node's own
token (its credential for the round): each request is signed with it (`signature`, over the
method, the path and the body), the token itself never sent; where the server is https, the
file may hold the CA bundle ("ca") the node verifies it against.

Long runs: while the roles run it sends `RecordLifecycleActionHeartbeat` every `heartbeat_s`
(the stack sets a fraction of the hook's timeout), so a bootstrap longer than the timeout is not
abandoned (Auto Scaling user guide, "Amazon EC2 Auto Scaling lifecycle hooks": a heartbeat
restarts the timeout).

Reboots: Ansible's reboot module refuses a local connection, so the nvidia_driver role, run
here, writes `REBOOT_REQUEST` and ends the play for this host instead. The bootstrap then
records its progress (`STATE`), installs a systemd unit that runs it again at the next boot, and
reboots; the run after the boot converges again (every role is idempotent: what was done
reports ok) and goes on from there. The hook is completed only at the real end, never before a
reboot; a node that asks for more than `MAX_REBOOTS` reboots is abandoned.

    python3 node_bootstrap.py ARTIFACT_DIR
"""
