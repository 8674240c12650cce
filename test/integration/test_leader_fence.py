"""One leader at a time, proven from the API server's audit log: two `torchrun-controller`
processes with leader election; the leader is frozen (SIGSTOP) past its lease, the other takes
over and jobs keep progressing; when the old leader wakes up (SIGCONT) it must not send a single
write — not even a Lease renewal — and must exit non-zero.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs import controller_command, make_job, make_queue, phases
from testbed import Cluster, wait_until

LEASE = "torchrun-controller"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


@contextmanager
def candidate(
    cluster: Cluster, namespace: str, identity: str, logs: Path
) -> Iterator[subprocess.Popen[bytes]]:
    cmd = controller_command(
        cluster,
        namespace,
        "--leader-elect",
        "--leader-elect-namespace",
        namespace,
        "--leader-elect-identity",
        identity,
        "--leader-elect-lease-duration",
        "4",
        "--leader-elect-renew-deadline",
        "3",
        "--leader-elect-retry-period",
        "0.5",
        "--log-format",
        "console",
    )
    with (logs / f"{identity}.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()


def holder(cluster: Cluster, namespace: str) -> str:
    proc = cluster.kubectl("get", "lease", LEASE, "-n", namespace, "-o", "json", check=False)
    if proc.returncode != 0:
        return ""
    return str(json.loads(proc.stdout)["spec"].get("holderIdentity") or "")


def audit_writes(cluster: Cluster) -> list[dict[str, Any]]:
    """Every write the API server recorded (hack/controlplane.sh: Metadata level, writes only)."""
    events = []
    for path in sorted(cluster.run_dir.glob("audit*.log")):
        for line in path.read_text().splitlines():
            if line.strip():
                event = json.loads(line)
                if event.get("verb") in WRITES:
                    events.append(event)
    return events


def received(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def flush_audit_log(cluster: Cluster, namespace: str) -> None:
    """Write a marker and wait for it in the audit log: everything before it is on disk."""
    name = f"marker-{time.monotonic_ns()}"
    cluster.kubectl("create", "configmap", name, "-n", namespace)
    wait_until(
        lambda: any((e.get("objectRef") or {}).get("name") == name for e in audit_writes(cluster)),
        30,
        message="the audit log to catch up",
    )


def test_a_frozen_leader_that_wakes_after_a_takeover_writes_nothing_and_exits(
    cluster: Cluster, crds: Path, namespace: str, tmp_path: Path
) -> None:
    q = make_queue(cluster, gpus=8, duration="1s")
    old_agent = "torchrun-controller/alpha"

    def this_tests(event: dict[str, Any]) -> bool:
        """A write into this test's namespace or to a cluster-scoped object (the queue): the audit
        log is the control plane's, and another module's replicas may have had the same names."""
        return event["objectRef"].get("namespace") in (namespace, None)

    def old_leader_writes() -> list[dict[str, Any]]:
        return [e for e in audit_writes(cluster) if e.get("userAgent") == old_agent and this_tests(e)]

    def logs(identity: str) -> str:
        return (tmp_path / f"{identity}.log").read_text()[-3000:]

    with ExitStack() as stack:
        alpha = stack.enter_context(candidate(cluster, namespace, "alpha", tmp_path))
        wait_until(lambda: holder(cluster, namespace) == "alpha", 30, message="alpha leads")
        beta = stack.enter_context(candidate(cluster, namespace, "beta", tmp_path))
        make_job(cluster, namespace, q, "before")
        wait_until(lambda: phases(cluster, namespace).get("before") == "Succeeded", 90, message="before")

        # freeze alpha once it has gone quiet (the queue's job counts follow 2 s after a job
        # change), so no write of its own is caught half-sent by the freeze
        def quiet() -> bool:
            mine = [e for e in old_leader_writes() if e["objectRef"]["resource"] != "leases"]
            return bool(mine) and (datetime.now(timezone.utc) - received(mine[-1])).total_seconds() > 3

        wait_until(quiet, 30, interval=0.5, message="alpha to go quiet")
        # beta, a standby, filled its caches (warm for a takeover) and led nothing
        wait_until(lambda: "caches synced" in logs("beta"), 30, message="the standby's caches to sync")
        assert "became leader" not in logs("beta"), logs("beta")
        alpha.send_signal(signal.SIGSTOP)
        frozen_at = datetime.now(timezone.utc)

        make_job(cluster, namespace, q, "after")
        wait_until(lambda: holder(cluster, namespace) == "beta", 30, message="beta takes over")
        wait_until(
            lambda: phases(cluster, namespace).get("after") == "Succeeded",
            90,
            message=f"the job submitted after the freeze; beta's log:\n{logs('beta')}",
        )

        # work waiting for alpha the moment it wakes: its informers hand it this job at once
        make_job(cluster, namespace, q, "woken")
        woken_at = datetime.now(timezone.utc)
        alpha.send_signal(signal.SIGCONT)
        try:
            code = alpha.wait(30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the old leader kept running; its log:\n{logs('alpha')}") from None
        assert code != 0, logs("alpha")
        assert "leader election lost" in logs("alpha")
        wait_until(lambda: phases(cluster, namespace).get("woken") == "Succeeded", 90, message="woken")

        # a clean stop of the new leader: drain, release the Lease, exit 0
        beta.send_signal(signal.SIGTERM)
        assert beta.wait(30) == 0, logs("beta")
        assert holder(cluster, namespace) == ""

    flush_audit_log(cluster, namespace)
    writes = old_leader_writes()
    before = [e for e in writes if received(e) < frozen_at and e["objectRef"]["resource"] != "leases"]
    assert before, "alpha wrote while it led (else the check below proves nothing)"
    late = [
        (e["verb"], e["requestURI"], e["requestReceivedTimestamp"]) for e in writes if received(e) >= woken_at
    ]
    assert late == [], f"the old leader wrote after waking up: {late}\n{logs('alpha')}"
    # the standby's warm caches sent no write: not one, not even to the Lease alpha held
    standby = [
        (e["verb"], e["requestURI"])
        for e in audit_writes(cluster)
        if e.get("userAgent") == "torchrun-controller/beta" and received(e) < frozen_at and this_tests(e)
    ]
    assert standby == [], standby
