"""The cluster's scheduler as the operator's commands see it: its queue (reap's busy check) and
its job records (cost per job), read from the controller over SSH, and the one seam a host's
commands run through."""
