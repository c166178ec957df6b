"""`rackform alerts`: Prometheus recording and alerting rules for clusters, from their plans."""
