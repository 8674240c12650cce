"""The leader's pod label: progress reports reach the leading replica alone.

The progress Service (config/manager/service.yaml) selects `LEADER_LABEL=true`, so it routes to
the one replica that accepts reports; a standby, Ready or not, gets none. The leader puts the
label on its own pod (found by the downward API's POD_NAME/POD_NAMESPACE) and takes it off every
other replica of the same controller, so an ex-leader that hung with the label cannot keep it;
a replica that stops leading takes its own off, best effort.

What we touch is proven ours, never guessed from a label (users reuse label keys):
- our own pod, by name and UID (every patch carries the UID as a precondition);
- another pod only when its controller owner chain reaches the Deployment, by UID, that controls
  our own pod through its ReplicaSet (pod → ReplicaSet → Deployment; client-go's
  `resolveControllerRef` at each step). Anything else carrying the label is left as it is and
  logged: no proof, no write.

The leader's writes go through the fenced client (a replica past its renew deadline sends none);
only dropping our own label bypasses the fence: it is always safe, and a deposed leader should.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from controller.api.labels import LEADER_LABEL
from controller.meta import GroupKind, Obj, resolve_owner
from controller.rest.client import FIELD_MANAGER, PATCH_TYPES, RESTClient
from controller.rest.errors import ApiError
from controller.rest.resources import PODS, REPLICASETS

log = structlog.get_logger("leaderelection")

LEADER_VALUE = "true"
DEPLOYMENT = GroupKind("apps", "Deployment")
REPLICASET = GroupKind("apps", "ReplicaSet")
CLAIM_PERIOD = 30.0  # seconds between the leader's looks at the label (a failed look: RETRY)
RETRY = 2.0
DROP_TIMEOUT = 2.0  # seconds the best-effort drop may take: it runs while the process stops


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def owning_deployment(pod: Obj, replicasets: Mapping[str, Obj]) -> str | None:
    """The UID of the Deployment that controls `pod` through its controller ReplicaSet (looked up
    by name in `replicasets` and accepted only with the referenced UID), or None."""
    owner = resolve_owner(pod, DEPLOYMENT, REPLICASET, lambda _ns, name: replicasets.get(name))
    return owner.uid if owner is not None and owner.uid else None


def replicas_to_unlabel(own: Obj, labelled: Iterable[Obj], replicasets: Mapping[str, Obj]) -> list[Obj]:
    """The pods of `labelled` the leader (pod `own`) takes the label off: every other replica of
    the very same Deployment (by UID). None when `own` is not a Deployment's: then nothing else
    is provably ours."""
    mine = owning_deployment(own, replicasets)
    if mine is None:
        return []
    return [p for p in labelled if _uid(p) != _uid(own) and owning_deployment(p, replicasets) == mine]


def has_label(pod: Obj) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LEADER_LABEL) == LEADER_VALUE


def _label_pointer() -> str:
    return "/metadata/labels/" + LEADER_LABEL.replace("~", "~0").replace("/", "~1")


class LeaderPodLabel:
    """Keeps `LEADER_LABEL` on this replica's pod while it leads, and on no other replica."""

    def __init__(self, client: RESTClient, namespace: str, pod_name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.pod_name = pod_name
        self._own_uid = ""

    def claim(self) -> list[str]:
        """One pass: label our pod, then take the label off every other replica proven ours.
        Returns the names of the pods unlabelled. API errors propagate (the caller retries)."""
        own = self.client.get(PODS, self.pod_name, self.namespace)
        self._own_uid = _uid(own)
        if not has_label(own):
            patch = {"metadata": {"uid": self._own_uid, "labels": {LEADER_LABEL: LEADER_VALUE}}}
            self.client.patch(PODS, self.pod_name, patch, self.namespace)
            log.info("labelled own pod as the leader", pod=f"{self.namespace}/{self.pod_name}")
        items = self.client.list(PODS, self.namespace, label_selector=f"{LEADER_LABEL}={LEADER_VALUE}")
        others = [p for p in items.get("items") or () if _uid(p) != self._own_uid]
        if not others:
            return []
        chosen = replicas_to_unlabel(own, others, self._replicasets([own, *others]))
        for pod in others:
            if pod not in chosen:
                log.warning(
                    "a pod not proven a replica of this controller carries the leader label; left alone",
                    pod=f"{self.namespace}/{pod['metadata']['name']}",
                    label=LEADER_LABEL,
                )
        done = []
        for pod in chosen:
            name = pod["metadata"]["name"]
            if self._unlabel(name, _uid(pod), fenced=True, timeout=None):
                done.append(name)
                log.info("took the leader label off another replica", pod=f"{self.namespace}/{name}")
        return done

    def _replicasets(self, pods: Iterable[Obj]) -> dict[str, Obj]:
        """The controller ReplicaSets of `pods`, by name (gone ones left out)."""
        names = set()
        for pod in pods:
            for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
                if ref.get("controller") and REPLICASET.named_by(ref):
                    names.add(str(ref.get("name") or ""))
        found: dict[str, Obj] = {}
        for name in sorted(n for n in names if n):
            try:
                found[name] = self.client.get(REPLICASETS, name, self.namespace)
            except ApiError as exc:
                if not exc.not_found:
                    raise
        return found

    def _unlabel(self, name: str, uid: str, *, fenced: bool, timeout: float | None) -> bool:
        """Remove the label from pod `name` if it is still the pod with `uid` and still carries it.
        False when it is gone, another pod by now, or unlabelled already (nothing to do)."""
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "remove", "path": _label_pointer()},
        ]
        try:
            self.client.request(
                "patch",
                "PATCH",
                PODS.path(self.namespace, name),
                PODS.key,
                params={"fieldManager": FIELD_MANAGER},
                body=patch,
                content_type=PATCH_TYPES["json"],
                fenced=fenced,
                attempts=None if timeout is None else 1,
                timeout=timeout,
            )
        except ApiError as exc:
            if exc.not_found or exc.invalid:  # gone, replaced, or the label is not there
                return False
            raise
        return True

    def drop(self) -> None:
        """Best effort: take the label off our own pod (we stopped leading, or are stopping)."""
        if not self.pod_name:
            return
        try:
            uid = self._own_uid or _uid(
                self.client.get(PODS, self.pod_name, self.namespace, attempts=1, timeout=DROP_TIMEOUT)
            )
            if self._unlabel(self.pod_name, uid, fenced=False, timeout=DROP_TIMEOUT):
                log.info("took the leader label off own pod", pod=f"{self.namespace}/{self.pod_name}")
        except Exception as exc:  # best effort: the next leader takes it off anyway
            log.warning("could not take the leader label off own pod", error=str(exc))

    def run(self, stop: threading.Event, leading: Callable[[], bool]) -> None:
        """While `leading()` and not `stop`: claim now, then every CLAIM_PERIOD (RETRY after a
        failure), so a label lost or added by hand is put right."""
        while not stop.is_set() and leading():
            try:
                self.claim()
                wait = CLAIM_PERIOD
            except Exception as exc:
                log.warning("leader label pass failed", error=str(exc))
                wait = RETRY
            stop.wait(wait)


def pod_label_from_env(client: RESTClient, environ: Mapping[str, Any]) -> LeaderPodLabel | None:
    """The label keeper of the pod named by the downward API (POD_NAME, POD_NAMESPACE), or None
    outside a pod (a controller run from a shell labels nothing)."""
    name, namespace = environ.get("POD_NAME") or "", environ.get("POD_NAMESPACE") or ""
    if not name or not namespace:
        return None
    return LeaderPodLabel(client, namespace, name)
