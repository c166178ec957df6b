"""The cluster's scheduler as the operator's commands see it: its queue (reap's busy check), its
nodes' drain, and its job records (cost per job), read from the controller over SSH."""
