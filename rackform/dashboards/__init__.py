"""Grafana dashboards for rackform's clusters, built with Grafana Labs' dashboards-as-code SDK:
the views `rackform report` draws, over the series rackform exports and the dcgm role scrapes."""
