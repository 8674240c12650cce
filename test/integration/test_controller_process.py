"""The `torchrun-controller` program as a process: crash-safety and many jobs at once."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobs import controller_command, make_queue, phases
from testbed import Cluster, wait_until


@contextmanager
def controller_process(cluster: Cluster, namespace: str, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
    cmd = controller_command(cluster, namespace, "--log-level", "warning", *flags)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def jobs_manifest(queue_name: str, names: list[str]) -> list[dict[str, object]]:
    return [
        {
            "apiVersion": "torchrun.ai/v1alpha1",
            "kind": "TorchrunJob",
            "metadata": {"name": n},
            "spec": {
                "jobQueue": queue_name,
                "numNodes": 2,
                "command": "python train.py",
                "workspace": {"source": "none"},
            },
        }
        for n in names
    ]


WRITE_LOGS = ("created", "status")  # the controller logs each create and each status write


def kill_after_writes(cluster: Cluster, namespace: str, writes: int, timeout: float = 20.0) -> int:
    """Run the controller until it has logged `writes` writes, then SIGKILL it at once (between
    that write and the next one of the same reconcile); returns how many writes it logged."""
    cmd = controller_command(cluster, namespace, "--log-level", "info", "--log-format", "json")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    seen, buf = 0, b""
    deadline = time.monotonic() + timeout
    try:
        # never block on the pipe: a controller with nothing left to write logs nothing
        while seen < writes and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("event") in WRITE_LOGS:
                    seen += 1
                    if seen >= writes:
                        break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    return seen


# announced once per attempt of the job; every other transition of ours has a message of its own
# (the restart's number is in it) and is announced once at most
PER_ATTEMPT = {"AllWorkersRunning"}


def test_killed_right_after_each_write_nothing_duplicates_and_the_count_is_exact(
    cluster: Cluster, crds: Path, namespace: str
) -> None:
    """Kill -9 the controller right after its 1st, 2nd, 3rd ... logged write (a fresh process each
    time), while a job fails and is restarted twice; then let one process finish. What a crash
    between two writes could duplicate, and what the duplicate would look like:

    - a restart counted twice, or done twice and counted once: `status.restarts` is exactly 2 and
      the workers really ran exactly 3 times (2 pods created by the Job controller per attempt);
    - a transition announced again by the next process: each of our Events (reason and message,
      summed over the Event objects of every process) at most once, one that comes once per
      attempt at most once per attempt. A crash may lose an announcement (it is recorded after
      the status write that makes the transition), never repeat it.

    Worker Jobs and Services are not counted: their names are fixed, so a second create is a 409."""
    q = make_queue(cluster, gpus=8, duration="1s", outcome="fail")
    manifest = jobs_manifest(q, ["crash"])
    manifest[0]["spec"]["failurePolicy"] = {"maxRestarts": 2}
    cluster.apply(manifest, namespace)
    killed_at = []
    for writes in range(1, 9):
        if phases(cluster, namespace).get("crash") == "Failed":
            break
        killed_at.append(kill_after_writes(cluster, namespace, writes))
    assert len(killed_at) >= 3 and max(killed_at) >= 3, killed_at  # real kills between real writes
    # a killed process may have written the end itself and died before announcing it
    ended_by_a_killed_process = phases(cluster, namespace).get("crash") == "Failed"
    with controller_process(cluster, namespace):
        wait_until(lambda: phases(cluster, namespace).get("crash") == "Failed", 120, message="Failed")
    status = cluster.get("torchrunjob", "crash", "-n", namespace)["status"]
    assert status["restarts"] == 2, status  # neither lost nor counted twice
    attempts = status["restarts"] + 1

    events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=crash")["items"]
    pods_created = sum(
        int(e.get("count") or 1)
        for e in events
        if e["involvedObject"]["kind"] == "Job" and e["reason"] == "SuccessfulCreate"
    )
    assert pods_created == 2 * attempts, events  # 2 nodes: a worker pod each, per attempt

    ours: dict[tuple[str, str], int] = {}
    for e in events:
        if e["involvedObject"]["kind"] == "TorchrunJob":
            key = (e["reason"], e["message"])
            ours[key] = ours.get(key, 0) + int(e.get("count") or 1)
    twice = {k: n for k, n in ours.items() if n > (attempts if k[0] in PER_ATTEMPT else 1)}
    assert not twice, ours
    # not vacuous: the Events were read, and a process that made the end and was never killed
    # announced it (one killed right after writing it may have lost the announcement, CI saw it)
    assert ours, events
    if not ended_by_a_killed_process:
        assert any(r == "RestartLimitExceeded" for r, _ in ours), ours


def test_fifty_jobs_with_four_workers_all_succeed(cluster: Cluster, crds: Path, namespace: str) -> None:
    q = make_queue(cluster, gpus=2, duration="2s")  # 2 nodes × 2 GPUs: 8 jobs fit at once, the rest wait
    names = [f"job-{i:02d}" for i in range(50)]
    with controller_process(cluster, namespace, "--threadiness", "4"):
        cluster.apply(jobs_manifest(q, names), namespace)
        wait_until(
            lambda: list(phases(cluster, namespace).values()).count("Succeeded") == 50,
            300,
            interval=1.0,
            message="50 jobs Succeeded",
        )
    assert len(cluster.get("jobs", "-n", namespace)["items"]) == 50
    for job in cluster.get("torchrunjobs", "-n", namespace)["items"]:
        assert job["status"]["restarts"] == 0
        assert job["status"]["workers"]["succeeded"] >= 1
