"""What Prometheus holds about a cluster's GPUs and nodes: the series' names and labels, and the
client that asks for them."""
