"""Prometheus metrics of the controller; see `registry` for the shared registry."""
