"""Prometheus metrics of the controller: registry.py (the shared registry, one bundle per process),
workqueue.py (the work queues' metrics under client-go's names), server.py (`/metrics`,
`/healthz`, `/readyz`).
"""
