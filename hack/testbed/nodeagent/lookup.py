"""What a pod's volumes and environment refer to, read from the API (`podvolumes.Lookup`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from controller.cache import Lister
from controller.rest import ApiError, Resource, RESTClient
from nodeagent.api import CONFIGMAPS, SECRETS
from nodeagent.podvolumes import NotReadyError, configmap_data, secret_data


class ApiLookup:
    def __init__(self, client: RESTClient, claims: Lister, volumes: Lister) -> None:
        self.client = client
        self.claims = claims
        self.volumes = volumes

    def claim_dir(self, namespace: str, claim: str) -> Path:
        pvc = self.claims.get(claim, namespace)
        name = (pvc or {}).get("spec", {}).get("volumeName")
        pv = self.volumes.get(name) if name else None
        host = ((pv or {}).get("spec") or {}).get("hostPath", {}).get("path")
        if not host:
            raise NotReadyError(f"claim {namespace}/{claim} is not bound to a hostPath volume yet")
        return Path(host)

    def secret(self, namespace: str, name: str, optional: bool) -> dict[str, bytes]:
        return self._get(SECRETS, namespace, name, optional, secret_data)

    def configmap(self, namespace: str, name: str, optional: bool) -> dict[str, bytes]:
        return self._get(CONFIGMAPS, namespace, name, optional, configmap_data)

    def _get(
        self,
        res: Resource,
        namespace: str,
        name: str,
        optional: bool,
        decode: Callable[[Mapping[str, Any]], dict[str, bytes]],
    ) -> dict[str, bytes]:
        try:
            return decode(self.client.get(res, name, namespace))
        except ApiError as exc:
            if exc.not_found and optional:
                return {}
            if exc.not_found:
                raise NotReadyError(f"{res.kind} {namespace}/{name} not found") from exc
            raise
