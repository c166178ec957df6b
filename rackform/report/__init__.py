"""`rackform report`: a static HTML page a person opens, offline, with each cluster's pictures:
utilization against the target and idle GPU-hours, cost per job and per team, time to repair per
node, failures over time, goodput and what was lost by cause. `dashboards` is the same for
Grafana."""
