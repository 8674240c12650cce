"""The chaos verdict (hack/bench/chaoscheck.py, loaded by its path: the benchmarks are not a
package) finds each kind of violation in a run's record, and none in a clean one."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from bench_modules import load


@pytest.fixture(scope="module")
def cc() -> ModuleType:
    return load("chaoscheck")


def ev(
    verb: str, resource: str, name: str, second: float, agent: str = "a0", code: int = 201
) -> dict[str, Any]:
    """An audit event; `agent` a replica's identity, or anybody else's user agent with a slash."""
    plural, _, sub = resource.partition("/")
    return {
        "verb": verb,
        "objectRef": {"resource": plural, "name": name, **({"subresource": sub} if sub else {})},
        "responseStatus": {"code": code},
        "userAgent": agent if "/" in agent else f"torchrun-controller/{agent}",
        "requestReceivedTimestamp": f"2026-11-25T10:00:{second:09.6f}Z",
    }


def job(name: str, phase: str = "Succeeded", restarts: int = 0, since: str = "t1") -> dict[str, Any]:
    done = {
        "type": "Succeeded",
        "status": "True" if phase == "Succeeded" else "False",
        "lastTransitionTime": since,
    }
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "status": {"phase": phase, "restarts": restarts, "conditions": [done], "completionTime": since},
    }


def child(kind: str, name: str, owner: str) -> dict[str, Any]:
    ref = {"uid": f"uid-{owner}", "controller": True}
    return {"kind": kind, "metadata": {"name": name, "ownerReferences": [ref]}}


KCM = "kube-controller-manager/v1.34.4"


def clean_run(cc: ModuleType) -> dict[str, Any]:
    writes = [
        ev("create", "leases", "torchrun-controller", 1.0),
        ev("create", "services", "j0", 2.0),
        ev("create", "jobs", "j0", 2.1),
        ev("create", "pods", "", 2.2, KCM),
        ev("create", "pods", "", 2.3, KCM),
        ev("create", "pods/binding", "j0-0-abcde", 2.4, "kube-scheduler/v1.34.4"),
        ev("create", "pods/binding", "j0-1-fghij", 2.5, "kube-scheduler/v1.34.4"),
        ev("delete", "pods", "j0-1-fghij", 3.0, KCM, code=200),  # successPolicy: not a violation
        ev("update", "torchrunjobs/status", "j0", 3.1),
    ]
    history = {"j0": [cc.Snapshot.of(job("j0", "Running")), cc.Snapshot.of(job("j0"))]}
    return {
        "names": {"j0"},
        "nodes": 2,
        "writes": writes,
        "history": history,
        "final_jobs": [job("j0")],
        "children": [child("Job", "j0", "j0"), child("Service", "j0", "j0")],
        "kills": {},
    }


def test_a_clean_run_has_no_violation(cc: ModuleType) -> None:
    verdict = cc.judge(**clean_run(cc))
    assert verdict.total == 0, verdict.details
    assert not verdict.seen, verdict.notes


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        (lambda r, cc: r["writes"].append(ev("create", "jobs", "j0", 5.0, "b0")), "job-creates"),
        (lambda r, cc: r["writes"].append(ev("delete", "jobs", "j0", 5.0, "b0", 200)), "child-deletes"),
        (
            lambda r, cc: r["writes"].append(ev("delete", "pods", "j0-0-abcde", 5.0, "a0", 200)),
            "child-deletes",
        ),
        (lambda r, cc: r["final_jobs"].clear(), "lost"),
        (lambda r, cc: r["final_jobs"].__setitem__(0, job("j0", "Running")), "stuck"),
        (lambda r, cc: r["children"].append(child("Job", "j0-copy", "j0")), "duplicate-children"),
        (lambda r, cc: r["history"]["j0"].append(cc.Snapshot.of(job("j0", "Running"))), "regressions"),
        (lambda r, cc: r["history"]["j0"].append(cc.Snapshot.of(job("j0", since="t2"))), "regressions"),
        (lambda r, cc: r["history"]["j0"].insert(0, cc.Snapshot.of(job("j0", "Running", 1))), "restarts"),
        (lambda r, cc: r["writes"].append(ev("update", "jobs", "j0", 5.0, "b0", 200)), "non-leader-writes"),
        (lambda r, cc: r["kills"].update(a0=3.0), "non-leader-writes"),  # its status write at 3.1
    ],
)
def test_each_violation_is_found(cc: ModuleType, change: Any, kind: str) -> None:
    run = clean_run(cc)
    run["kills"] = dict(run["kills"])
    change(run, cc)
    if kind == "non-leader-writes" and run["kills"]:
        run["writes"].append(ev("update", "torchrunjobs/status", "j0", 4.5))  # 1.5 s after its kill
    verdict = cc.judge(**run)
    assert verdict.counts[kind] >= 1, verdict.details


def test_a_create_answered_5xx_may_have_made_the_object(cc: ModuleType) -> None:
    """A replica killed mid-create: the server answers 504 after the write reached etcd."""
    run = clean_run(cc)
    run["writes"][1] = ev("create", "services", "j0", 2.0, code=504)
    assert cc.judge(**run).total == 0


def test_an_index_run_twice_by_the_job_controller_is_seen_not_a_violation(cc: ModuleType) -> None:
    run = clean_run(cc)
    run["writes"].append(ev("create", "pods/binding", "j0-0-klmno", 6.0, "kube-scheduler/v1.34.4"))
    verdict = cc.judge(**run)
    assert verdict.total == 0
    assert verdict.seen[cc.RERUNS] == 1


def test_failover_is_timed_from_the_kill_to_the_next_take_and_its_first_write(cc: ModuleType) -> None:
    writes = [
        ev("create", "leases", "torchrun-controller", 1.0, "a0"),
        ev("update", "leases", "torchrun-controller", 20.0, "b0", 200),
        ev("create", "jobs", "j0", 23.5, "b0"),
    ]
    (took, first), *_ = cc.failovers(writes, [(cc.received(writes[0]) + 4.0, "a0")])
    assert (round(took, 3), round(first, 3)) == (15.0, 18.5)


def test_an_index_that_never_ran_is_seen_not_a_violation(cc: ModuleType) -> None:
    """Its pod not created or not bound around an API server restart: index 0 succeeds alone on kwok."""
    run = clean_run(cc)
    run["writes"] = [e for e in run["writes"] if cc._name(e) != "j0-1-fghij"]
    verdict = cc.judge(**run)
    assert verdict.total == 0
    assert verdict.seen[cc.UNRUN] == 1
    assert not verdict.seen[cc.RERUNS]


def test_a_failed_job_is_quoted_with_its_failed_condition(cc: ModuleType) -> None:
    """A job seen Failed, and Failed at the end, names the reason and message that failed it: the
    run's namespace is gone by the time anyone reads the verdict."""
    run = clean_run(cc)
    failed = job("j0", "Failed")
    failed["status"]["conditions"].append(
        {"type": "Failed", "status": "True", "reason": "WorkersFailed", "message": "node rank 1 exited 1"}
    )
    run["history"] = {"j0": [cc.Snapshot.of(job("j0", "Running")), cc.Snapshot.of(failed)]}
    run["final_jobs"] = [failed]
    verdict = cc.judge(**run)
    assert "failed: j0: seen Failed (WorkersFailed: node rank 1 exited 1)" in verdict.details, verdict.details
    assert "stuck: j0: phase 'Failed' at the end (WorkersFailed: node rank 1 exited 1)" in verdict.details


def test_a_failed_job_comes_with_every_write_to_its_worker_pods(cc: ModuleType) -> None:
    """What a failed index's pod went through: who patched its status and who deleted it, oldest
    first; another job's pods and other resources are left out."""
    run = clean_run(cc)
    run["writes"] += [
        ev("delete", "pods", "j0-0-abcde", 3.5, "kube-controller-manager/v1.34.4", 200),
        ev("patch", "pods/status", "j0-0-abcde", 3.2, "kwok/v0.7.0", 200),
        ev("patch", "pods/status", "j01-0-zzzzz", 3.3, "kwok/v0.7.0", 200),
    ]
    run["history"]["j0"].insert(1, cc.Snapshot.of(job("j0", "Failed")))
    verdict = cc.judge(**run)
    assert verdict.counts["failed"] == 1
    assert verdict.trails == [
        "j0: 10:00:02.400 create pods/binding j0-0-abcde 201 by kube-scheduler/v1.34.4",
        "j0: 10:00:02.500 create pods/binding j0-1-fghij 201 by kube-scheduler/v1.34.4",
        "j0: 10:00:03.000 delete pods j0-1-fghij 200 by kube-controller-manager/v1.34.4",
        "j0: 10:00:03.200 patch pods/status j0-0-abcde 200 by kwok/v0.7.0",
        "j0: 10:00:03.500 delete pods j0-0-abcde 200 by kube-controller-manager/v1.34.4",
    ]
    assert not cc.judge(**clean_run(cc)).trails  # a job that never failed has none
