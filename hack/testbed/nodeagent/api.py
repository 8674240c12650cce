"""The resources, labels and annotations the node agent reads and writes: one home for each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from controller.meta import Resource

PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)
# kwok's debugging resources (sigs.k8s.io/kwok pkg/apis/v1alpha1 exec_types.go, logs_types.go)
EXECS = Resource("kwok.x-k8s.io", "v1alpha1", "execs", "Exec")
LOGS = Resource("kwok.x-k8s.io", "v1alpha1", "logs", "Logs")

PROVISIONER: Final = "testbed.torchrun.ai/hostpath"
PROVISIONED_BY: Final = "pv.kubernetes.io/provisioned-by"  # kcm leaves deleting such PVs to us
KWOK_NODE: Final = ("kwok.x-k8s.io/node", "fake")  # the annotation kwok manages nodes by

ROLE_LABEL: Final = "torchrun.ai/role"  # the controller's (controller.api.labels)
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
# Set on a sync pod once its volumes, Exec and Logs are ready; kwok's pod-start stage waits for
# it (hack/testbed/kwok/stages.yaml), as a kubelet mounts volumes before starting containers.
PREPARED: Final = "testbed.torchrun.ai/prepared"
# Set on a sync pod when its process starts: the agent run that started it. An agent that finds
# another run's mark on a Running pod knows the process died with that run.
STARTED_BY: Final = "testbed.torchrun.ai/started-by"
WORKER_LOGS: Final = "kwok.torchrun.ai/logs"  # a worker pod's log lines, separated by newlines
FIELD_MANAGER: Final = "testbed-node-agent"


def is_kwok_node(node: Mapping[str, Any] | None) -> bool:
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(KWOK_NODE[0]) == KWOK_NODE[1])
