"""What W2 (bigjob.py) and W3 (atrest.py) share: the run's control plane and client (`Cluster`), the two
controllers they compare started at a given client rate, and each controller's own writes.

Both controllers talk to the API server as admin: the audit log tells their writes apart by user
agent only (controllers.py).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from auditlog import by_agent
from controllers import (
    PYTORCHJOBS,
    TORCHRUN_USER_AGENT,
    TRAINING_OPERATOR_USER_AGENT,
    start_torchrun_controller,
    start_training_operator,
)

from controller.api.resources import TORCHRUNJOBS
from controller.rest import Resource, RESTClient

# the test bed's stand-in for a kubelet writes a kwok `Logs` per worker pod of ours: no real cluster does
TESTBED_AGENTS = frozenset({"testbed-node-agent"})


@dataclass
class Cluster:
    """The run's control plane, the bench's client, training-operator's build, and the common
    client rate and workers of both controllers."""

    kubeconfig: Path
    rest: RESTClient
    to_home: Path
    threads: int
    qps: int
    burst: int


@dataclass(frozen=True)
class Subject:
    """A controller compared: its name, the user agent of its writes, the resource of its jobs."""

    name: str
    agent: str
    resource: Resource

    @property
    def ours(self) -> bool:
        return self.agent == TORCHRUN_USER_AGENT


TRAINING_OPERATOR = Subject("training-operator", TRAINING_OPERATOR_USER_AGENT, PYTORCHJOBS)
OURS = Subject("torchrun-controller", TORCHRUN_USER_AGENT, TORCHRUNJOBS)
SUBJECTS = (TRAINING_OPERATOR, OURS)


def start(
    c: Cluster, subject: Subject, ns: str, qps: int, burst: int, extra: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], int | None]:
    """The subject's controller for `ns` at client rate (qps, burst), `extra` flags for ours, ready:
    the process and (ours) its metrics port."""
    logs = c.kubeconfig.parent / "logs"
    if subject.ours:
        log = logs / f"torchrun-controller-{ns}.log"
        return start_torchrun_controller(
            c.kubeconfig, ns, threadiness=c.threads, qps=qps, burst=burst, extra=extra, log=log
        )
    log = logs / f"training-operator-{ns}.log"
    proc = start_training_operator(
        c.kubeconfig, c.rest, c.to_home, ns, threads=c.threads, qps=qps, burst=burst, log=log
    )
    return proc, None


def writes_of(subject: Subject, writes: list[dict[str, Any]]) -> tuple[int, int]:
    """(the subject's own writes, every write but the test bed's node agent's) among `writes`."""
    agents = by_agent(writes)
    own = sum(n for a, n in agents.items() if a.startswith(subject.agent.rstrip("/")))
    return own, sum(n for a, n in agents.items() if a not in TESTBED_AGENTS)
