"""The kube-apiserver's audit log: what was really sent to the API server, by whom, and when.

hack/controlplane.sh runs the kube-apiserver with `--audit-log-path $RUN_DIR/audit.log`, JSON
lines at Metadata level: every write (create, update, patch, delete, deletecollection) of every
user, and the reads (get, list, watch) of the deployed controller's ServiceAccount only. Each
event carries `verb`, `objectRef` (`resource`, `subresource`, `apiGroup`, `namespace`, `name`),
`user.username`, `userAgent`, the authorizer's decision and `requestReceivedTimestamp` with
microsecond resolution, taken by the server when the request arrived: a test can time what the
controller did without its own observation lag.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, NamedTuple

from testbed import Cluster, wait_until

Event = dict[str, Any]


def events(cluster: Cluster, needle: str = "") -> list[Event]:
    """Every audit event so far (rotated files included) whose raw line contains `needle`
    (a cheap filter before parsing: a test's namespace or a user name)."""
    out = []
    for path in sorted(cluster.run_dir.glob("audit*.log")):
        with path.open() as f:
            for line in f:
                if needle in line and line.endswith("\n"):  # a half-written last line waits
                    out.append(json.loads(line))
    return out


def received(event: Event) -> datetime:
    """When the API server received the request (UTC, microseconds)."""
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def ref(event: Event) -> dict[str, str]:
    return dict(event.get("objectRef") or {})


def flush(cluster: Cluster, namespace: str) -> None:
    """Write a marker and wait until it is in the log: every request answered before is on disk."""
    name = f"audit-marker-{time.monotonic_ns()}"
    cluster.kubectl("create", "configmap", name, "-n", namespace)
    wait_until(
        lambda: any(ref(e).get("name") == name for e in events(cluster, name)),
        30,
        message="the audit log to catch up",
    )


def requests_to(cluster: Cluster, namespace: str, resource: str, name: str, verb: str) -> list[Event]:
    """The `verb` requests on one object, oldest first (flush first to see the latest)."""
    return [
        e
        for e in events(cluster, namespace)
        if e.get("verb") == verb
        and e.get("stage") == "ResponseComplete"
        and (ref(e).get("resource"), ref(e).get("namespace"), ref(e).get("name"), ref(e).get("subresource"))
        == (resource, namespace, name, None)
    ]


class Request(NamedTuple):
    """One kind of request, as the audit log records it: on which object, by which verb."""

    group: str
    resource: str  # "plural" or "plural/subresource"
    verb: str
    namespace: str
    name: str


def requests_by(cluster: Cluster, user: str) -> dict[Request, list[Event]]:
    """Every resource request `user` sent so far, each kind with its events (hack/controlplane.sh
    records the writes of every user and the reads of the deployed controller's ServiceAccount);
    discovery has no objectRef and is left out."""
    out: dict[Request, list[Event]] = {}
    for event in events(cluster, user):
        r = event.get("objectRef")
        if event["user"]["username"] != user or not r:
            continue
        resource = r["resource"] + (f"/{r['subresource']}" if r.get("subresource") else "")
        key = Request(
            r.get("apiGroup", ""), resource, event["verb"], r.get("namespace", ""), r.get("name", "")
        )
        out.setdefault(key, []).append(event)
    return out


def decided(event: Event) -> str:
    """The authorizer's decision on the request: "allow" or "forbid"."""
    return str((event.get("annotations") or {}).get("authorization.k8s.io/decision"))
