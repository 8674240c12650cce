"""Descriptors of the built-in resources the controller reads and writes (`Resource` lives in
`controller.meta`, so the API types can name resources without importing the REST layer)."""

from __future__ import annotations

from controller.meta import Resource

PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
JOBS = Resource("batch", "v1", "jobs", "Job")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
