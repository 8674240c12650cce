"""Where the API server is and how to authenticate, as the `kubernetes` package resolves it.

`load_config(kubeconfig)` follows the controller's flag: an explicit kubeconfig path wins; without
one, in-cluster service-account config when running in a pod, else kubectl's default loading
rules ($KUBECONFIG, then ~/.kube/config).
"""

from __future__ import annotations

import os

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config


def load_config(kubeconfig: str | None = None, context: str | None = None) -> k8s_client.Configuration:
    cfg = k8s_client.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        k8s_config.load_kube_config(context=context, client_configuration=cfg)
    return cfg


def current_namespace(kubeconfig: str | None = None) -> str:
    """The namespace kubectl would use: the kubeconfig context's, the pod's own, or `default`."""
    try:
        _, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
        ns = (active or {}).get("context", {}).get("namespace")
        if ns:
            return str(ns)
    except (k8s_config.ConfigException, OSError, TypeError):
        pass
    sa_ns = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    if os.path.exists(sa_ns):
        with open(sa_ns, encoding="utf-8") as f:
            return f.read().strip()
    return "default"
