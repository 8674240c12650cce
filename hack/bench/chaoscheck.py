"""The verdict on a chaos run (W4): did every job end exactly once, as it should?

Pure — data in, violations out, the standard library only — so that the benchmark
(hack/bench/chaos.py) and the suite's test (test/integration/test_chaos.py, which runs that
benchmark's workload on the suite's control plane) judge a run the same way. Three witnesses:

- the API server's audit log of the run's namespace (every write, with who sent it and when the
  server received it: hack/bench/auditlog.py), so a child created twice is seen even when the
  second copy was deleted again before the end;
- every state of each TorchrunJob a watch saw over the run, oldest first (`Snapshot`), so a
  condition that went back, or a restart counted for a moment, is seen even if it was undone;
- the objects at the end.

The jobs of a chaos run succeed on their own (their kwok pods end with exit code 0), no pod
fails, and nobody deletes anything, so the right outcome is exact: each job Succeeded, one
Indexed Job, one Service, `restarts` 0 throughout, and no write by a controller replica that did
not hold the Lease at the time. A worker index run twice or never is counted apart (RERUNS,
UNRUN): kube-controller-manager creates the pods, not this controller.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

CONTROLLER_AGENT = "torchrun-controller/"  # then the replica's --leader-elect-identity
LEASE = "torchrun-controller"  # the Lease the replicas elect on (controller/cmd/main.py)
OK = (200, 201)
KILL_GRACE = 1.0  # seconds
# a child of job <j> by name (SPEC §4): the Indexed Job and the Service are <j>, the claims
# <j>-workspace and <j>-checkpoints, worker pods <j>-<index>-<5 random> (the Job controller's)
_WORKER_POD = re.compile(r"^(?P<job>.+)-(?P<index>\d+)-[a-z0-9]{5}$")
_CLAIM = re.compile(r"^(?P<job>.+)-(?:workspace|checkpoints)$")

Event = dict[str, Any]


@dataclass(frozen=True)
class Snapshot:
    """What a watch saw of one TorchrunJob's status at one moment."""

    phase: str
    succeeded: str  # the Succeeded condition's status ("" without one)
    succeeded_since: str  # its lastTransitionTime
    failed: str  # the Failed condition's status
    restarts: int
    completion_time: str
    failed_why: str = ""  # the Failed condition's `reason: message`, what a violation quotes

    @classmethod
    def of(cls, job: dict[str, Any]) -> Snapshot:
        status = job.get("status") or {}
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        done = conds.get("Succeeded") or {}
        failed = conds.get("Failed") or {}
        return cls(
            phase=str(status.get("phase") or ""),
            succeeded=str(done.get("status") or ""),
            succeeded_since=str(done.get("lastTransitionTime") or ""),
            failed=str(failed.get("status") or ""),
            restarts=int(status.get("restarts") or 0),
            completion_time=str(status.get("completionTime") or ""),
            failed_why=f"{failed.get('reason') or ''}: {failed.get('message') or ''}" if failed else "",
        )

    @property
    def done(self) -> bool:
        return self.phase == "Succeeded" and self.succeeded == "True"

    @property
    def failed_now(self) -> bool:
        """Failed, by its condition or its phase."""
        return self.failed == "True" or self.phase == "Failed"


@dataclass
class Verdict:
    """Violations by kind (0 everywhere is the target), with one line per violation; and what was
    seen that is not ours to answer for (`seen`, `notes`)."""

    counts: Counter[str] = field(default_factory=Counter)
    details: list[str] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    trails: list[str] = field(default_factory=list)  # what a failed job's worker pods went through

    def add(self, kind: str, detail: str) -> None:
        self.counts[kind] += 1
        self.details.append(f"{kind}: {detail}")

    def see(self, kind: str, detail: str) -> None:
        self.seen[kind] += 1
        self.notes.append(f"{kind}: {detail}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())


# Not violations of this controller, counted apart: kube-controller-manager's Job controller
# creates the worker pods. After an API server restart and a compaction it was seen to create an
# index's pod again although the index had already succeeded (its caches behind its own writes):
# the user's program ran twice, with no write of ours causing it, as the audit log shows (our
# replicas' deletes and Job creates are violations of their own). And a job whose index-1 pod was
# not created or not bound around the restart can still succeed: kwok ends each pod on its own,
# index 0 succeeds alone and the success policy then ends the Job (real ranks would wait for
# each other's rendezvous instead).
RERUNS = "worker index run twice (kube-controller-manager)"
UNRUN = "worker index never ran (index 0 succeeded alone: kwok)"
KINDS = (
    "lost",  # a submitted job is gone, or never got its Indexed Job
    "stuck",  # not Succeeded when the run ended
    "failed",  # seen Failed
    "job-creates",  # its Indexed Job created other than once (a job run twice)
    "service-creates",  # its Service created other than once
    "claim-creates",  # a claim of it created more than once
    "child-deletes",  # its Job, Service or claim deleted, or a worker pod by a controller replica
    "duplicate-children",  # more than one Job, Service or claim of a name owned by it at the end
    "restarts",  # status.restarts other than 0, ever
    "regressions",  # once Succeeded, seen otherwise; or its completion moved
    "non-leader-writes",  # a replica wrote while another held the Lease (or after it was killed)
)


def job_of(name: str, jobs: set[str]) -> str | None:
    """The job an object belongs to by its name (the job's own, or the job's and a suffix)."""
    if name in jobs:
        return name
    for pattern in (_WORKER_POD, _CLAIM):
        m = pattern.match(name)
        if m and m.group("job") in jobs:
            return m.group("job")
    return None


def _name(event: Event) -> str:
    return str((event.get("objectRef") or {}).get("name") or "")


def _resource(event: Event) -> str:
    ref = event.get("objectRef") or {}
    return str(ref.get("resource", "")) + (f"/{ref['subresource']}" if ref.get("subresource") else "")


def _code(event: Event) -> int:
    return int((event.get("responseStatus") or {}).get("code") or 0)


def received(event: Event) -> float:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def identity(event: Event) -> str | None:
    """The controller replica that sent the request, or None for anybody else."""
    agent = str(event.get("userAgent") or "")
    return agent[len(CONTROLLER_AGENT) :] if agent.startswith(CONTROLLER_AGENT) else None


def lease_takes(writes: Iterable[Event]) -> list[tuple[float, str]]:
    """Each successful write of the Lease (a take or a renewal), as (received, identity), in order."""
    return sorted(
        (received(e), identity(e) or "")
        for e in writes
        if _resource(e) == "leases"
        and _name(e) == LEASE
        and e.get("verb") in ("create", "update")
        and _code(e) in OK
    )


def check_children(writes: list[Event], names: set[str], nodes: int, verdict: Verdict) -> None:
    """From the audit log: each job's Job and Service created once, a claim at most once, none of
    them deleted, and no worker pod deleted by a controller replica (the Job controller deletes
    the other indexes' pods once index 0 succeeded: its successPolicy).

    A create the server answered 201 made the object. One answered 5xx may have made it too (a
    replica killed mid-request: "context canceled" after the write reached etcd), so it counts
    as an attempt: a job whose Job no create made nor may have made is a violation, and a second
    object of one name needs a delete in between (else the create is refused as AlreadyExists),
    which is a violation by itself. A pod's create names no pod (the Job controller's pods have
    generated names), so worker pods are counted by their binding (the scheduler binds each pod
    once, by name), and all pod creates in total."""
    made: dict[str, Counter[str]] = {n: Counter() for n in names}  # by kind, or by a claim's name
    maybe: dict[str, Counter[str]] = {n: Counter() for n in names}
    bound: dict[str, Counter[str]] = {n: Counter() for n in names}
    ours: set[str] = set()  # jobs a replica of ours deleted a child of
    pod_creates = 0
    for e in writes:
        resource, verb, code = _resource(e), e.get("verb"), _code(e)
        if resource == "pods" and verb == "create" and code in OK:
            pod_creates += 1
        job = job_of(_name(e), names)
        if job is None:
            continue
        if verb == "create" and resource in ("jobs", "services", "persistentvolumeclaims"):
            key = resource if resource != "persistentvolumeclaims" else _name(e)
            if code in OK:
                made[job][key] += 1
            elif code >= 500 or code == 0:
                maybe[job][key] += 1
        elif verb == "create" and resource == "pods/binding" and code in OK:
            m = _WORKER_POD.match(_name(e))
            if m:
                bound[job][m.group("index")] += 1
        elif (
            verb in ("delete", "deletecollection")
            and code in OK
            and (resource in ("jobs", "services", "persistentvolumeclaims") or identity(e) is not None)
        ):
            verdict.add("child-deletes", f"{job}: {resource} {_name(e)} deleted by {e.get('userAgent')}")
            ours.add(job)
    for job in sorted(names):
        for key, kind in (("jobs", "job-creates"), ("services", "service-creates")):
            if made[job][key] > 1 or made[job][key] + maybe[job][key] == 0:
                verdict.add(kind, f"{job}: {key} created {made[job][key]} times ({maybe[job][key]} maybe)")
        for claim, n in made[job].items():
            if claim not in ("jobs", "services") and n > 1:
                verdict.add("claim-creates", f"{job}: claim {claim} created {n} times")
        per_index = bound[job]
        if job in ours or made[job]["jobs"] > 1:
            continue  # its pods ran again because of a violation of ours, counted above
        runs = {str(i): per_index[str(i)] for i in range(nodes)}
        if any(n > 1 for n in runs.values()):
            verdict.see(RERUNS, f"{job}: worker pods bound per index {runs}")
        if any(n == 0 for n in runs.values()):
            verdict.see(UNRUN, f"{job}: worker pods bound per index {runs}")
    if pod_creates != nodes * len(names):
        verdict.see("pod creates", f"{pod_creates} in all for {len(names)} jobs of {nodes} nodes")


def check_history(history: dict[str, list[Snapshot]], names: set[str], verdict: Verdict) -> None:
    """From what the watch saw: no Failed, no restart counted, nothing after Succeeded went back."""
    for job in sorted(names):
        seen = history.get(job, [])
        failed = next((s for s in seen if s.failed_now), None)
        if failed is not None:
            verdict.add("failed", f"{job}: seen Failed ({failed.failed_why or 'no Failed condition'})")
        counted = sorted({s.restarts for s in seen if s.restarts})
        if counted:
            verdict.add("restarts", f"{job}: status.restarts seen {counted}")
        first = next((i for i, s in enumerate(seen) if s.done), None)
        if first is None:
            continue
        done = seen[first]
        for later in seen[first + 1 :]:
            if not later.done:
                verdict.add("regressions", f"{job}: Succeeded, then seen phase {later.phase!r}")
                break
            if (later.succeeded_since, later.completion_time) != (done.succeeded_since, done.completion_time):
                verdict.add(
                    "regressions",
                    f"{job}: Succeeded at {done.succeeded_since} (completion {done.completion_time}),"
                    f" later at {later.succeeded_since} (completion {later.completion_time})",
                )
                break


def check_final(
    final_jobs: list[dict[str, Any]], children: list[dict[str, Any]], names: set[str], verdict: Verdict
) -> None:
    """From the objects at the end: every job there and Succeeded, no child twice."""
    by_name = {j["metadata"]["name"]: j for j in final_jobs}
    uids = {j["metadata"]["uid"]: n for n, j in by_name.items()}
    owned: Counter[tuple[str, str]] = Counter()
    for obj in children:
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("uid") in uids:
                owned[(uids[ref["uid"]], obj["kind"])] += 1
    for job in sorted(names):
        if job not in by_name:
            verdict.add("lost", f"{job}: not there at the end")
            continue
        snap = Snapshot.of(by_name[job])
        if not snap.done:
            why = f" ({snap.failed_why})" if snap.failed_why else ""
            verdict.add("stuck", f"{job}: phase {snap.phase!r} at the end{why}")
        if snap.restarts:
            verdict.add("restarts", f"{job}: status.restarts {snap.restarts} at the end")
        if owned[(job, "Job")] == 0:
            verdict.add("lost", f"{job}: no Indexed Job owned by it at the end")
        for kind in ("Job", "Service", "PersistentVolumeClaim"):
            if owned[(job, kind)] > 1 and kind != "PersistentVolumeClaim":
                verdict.add("duplicate-children", f"{job}: {owned[(job, kind)]} {kind}s owned by it")
    claims: Counter[str] = Counter(
        o["metadata"]["name"] for o in children if o["kind"] == "PersistentVolumeClaim"
    )
    for name, n in claims.items():
        if n > 1:
            verdict.add("duplicate-children", f"claim {name} listed {n} times")


def check_leadership(writes: list[Event], kills: dict[str, float], verdict: Verdict) -> None:
    """No replica wrote while another held the Lease, nor after it was killed (`kills`: identity →
    the moment of its SIGKILL; requests it had already sent may reach the server a moment
    later, hence KILL_GRACE). The holder at any moment is whoever last wrote the Lease
    successfully (a take or a renewal) before it, by the server's clock."""
    takes = lease_takes(writes)
    for e in writes:
        who = identity(e)
        if who is None or _resource(e) == "leases":
            continue
        t = received(e)
        holder = next((h for when, h in reversed(takes) if when <= t), "")
        if holder != who:
            verdict.add(
                "non-leader-writes", f"{who} {e.get('verb')} {_resource(e)} {_name(e)}: holder {holder!r}"
            )
        elif who in kills and t > kills[who] + KILL_GRACE:
            verdict.add(
                "non-leader-writes", f"{who} {e.get('verb')} {_resource(e)} {_name(e)} after its kill"
            )


def judge(
    names: set[str],
    nodes: int,
    writes: list[Event],
    history: dict[str, list[Snapshot]],
    final_jobs: list[dict[str, Any]],
    children: list[dict[str, Any]],
    kills: dict[str, float],
) -> Verdict:
    """Every violation of the run: `names` the jobs submitted (each `nodes` nodes), `writes` the
    namespace's audit events (writes), `history` what the watch saw of each job, `final_jobs`
    and `children` (Jobs, Services, claims) the objects at the end, `kills` each SIGKILLed
    replica's identity and when it was killed (epoch seconds)."""
    verdict = Verdict()
    for kind in KINDS:
        verdict.counts[kind] += 0
    check_final(final_jobs, children, names, verdict)
    check_history(history, names, verdict)
    check_children(writes, names, nodes, verdict)
    check_leadership(writes, kills, verdict)
    for job in sorted(j for j in names if any(s.failed_now for s in history.get(j, []))):
        verdict.trails.extend(worker_pod_trail(writes, job))
    return verdict


def worker_pod_trail(writes: list[Event], job: str) -> list[str]:
    """Every write to `job`'s worker pods by name, oldest first, one line each: when the server
    received it, the verb, the resource, the answer and who sent it — who bound, patched the status
    of, evicted or deleted each pod. A chaos run's pods never fail on their own, so a failed
    job's index failed because of one of these writes. (A pod's create carries no name yet:
    generateName.)"""
    lines = []
    for e in sorted(writes, key=received):
        m = _WORKER_POD.match(_name(e))
        if (e.get("objectRef") or {}).get("resource") != "pods" or not m or m.group("job") != job:
            continue
        at = str(e.get("requestReceivedTimestamp", ""))[11:23]
        lines.append(
            f"{job}: {at} {e.get('verb')} {_resource(e)} {_name(e)} {_code(e)} by {e.get('userAgent')}"
        )
    return lines


def failovers(writes: list[Event], kills: list[tuple[float, str]]) -> list[tuple[float, float | None]]:
    """For each kill of the leader (when, identity): seconds until another replica took the Lease,
    and until that replica's first write other than the Lease (None if it never wrote)."""
    takes = lease_takes(writes)
    out: list[tuple[float, float | None]] = []
    for when, who in kills:
        take = next(((t, h) for t, h in takes if t > when and h != who), None)
        if take is None:
            continue
        first = min(
            (
                received(e)
                for e in writes
                if identity(e) == take[1] and _resource(e) != "leases" and received(e) > when
            ),
            default=None,
        )
        out.append((take[0] - when, None if first is None else first - when))
    return out
