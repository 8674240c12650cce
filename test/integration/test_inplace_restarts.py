"""Restarts in place, the controller's side, on the control plane: the reporter sidecars' link is
a stand-in here (kwok runs no process: `post_state` sends what `sidecar/inplace.py` sends, with a
pod-bound token the API server minted), the controller is the real program with its endpoint. The
real node proves the in-pod side with torch (test/e2e/test_realnode.py)."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from jobs import make_job, queue_manifest
from reports import Replica, replica, token, wait_to_lead, worker_pod
from summary_notes import SUPERVISOR_LINK
from testbed import UNVERIFIED, Cluster, wait_until

from controller.api.codec import parse_time
from controller.rest import RESTClient, load_config
from controller.rest.resources import PODS

PERIOD = 3.0


class Bed(NamedTuple):
    namespace: str
    queue: str
    logs: Path
    rest: RESTClient


@pytest.fixture(scope="module")
def bed(cluster: Cluster, crds: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    queue = f"q-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(ns)
    cluster.apply(queue_manifest(queue, "run", nodeResources={"gpus": 0, "cpus": "20m"}))
    yield Bed(ns, queue, tmp_path_factory.mktemp("inplace"), RESTClient(load_config(str(cluster.kubeconfig))))
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")
    cluster.delete_namespace(ns)


@contextlib.contextmanager
def leader(cluster: Cluster, bed: Bed, identity: str) -> Iterator[Replica]:
    with replica(cluster, bed.namespace, bed.logs, identity, PERIOD, url=True) as one:
        wait_to_lead(cluster, bed.namespace, identity)
        yield one


def post_state(url: str, tok: str, job: str, state: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    """What the sidecar's link POSTs (`{"job", "inPlace"}`) and the whole answer."""
    body = json.dumps({"job": job, "inPlace": state}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {tok}"}
    req = urllib.request.Request(url, body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, context=UNVERIFIED, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def status(cluster: Cluster, ns: str, job: str) -> dict[str, Any]:
    return dict(cluster.get("torchrunjob", job, "-n", ns).get("status") or {})


def pod_uids(cluster: Cluster, ns: str, job: str) -> set[str]:
    selector = f"torchrun-job-name={job},torchrun.ai/role=worker"
    return {p["metadata"]["uid"] for p in cluster.get("pods", "-n", ns, "-l", selector)["items"]}


def restarted_in_place(cluster: Cluster, ns: str, job: str) -> list[str]:
    """The messages of `job`'s RestartedInPlace Events, sorted (the recorder writes them after the
    status: the test polls)."""
    events = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={job}")["items"]
    return sorted(e["message"] for e in events if e["reason"] == "RestartedInPlace")


def accepted(url: str, tok: str, job: str, state: dict[str, Any]) -> None:
    """POST `state` until it is accepted (10 s at most): a pod the test just saw Running may not be
    in the endpoint's cache yet (refused 403 until it is)."""
    wait_until(lambda: post_state(url, tok, job, state)[0] == 200, 10, message=f"{job}'s state accepted")


def answered(url: str, tok: str, job: str, state: dict[str, Any], want: dict[str, Any]) -> None:
    """POST `state` until the word answered is `want` (10 s at most): the endpoint reads the job
    from its cache, a moment behind the status the test read. Telling the same state again counts
    nothing, which the callers' later assertions check."""
    wait_until(
        lambda: post_state(url, tok, job, state)[1].get("inPlace") == want, 10, message=f"the word {want}"
    )


def final_or_refused(url: str, tok: str, job: str, state: dict[str, Any]) -> None:
    """POST `state` until the word is `final` or the pod is refused: 403, its worker Job or the pod
    already gone from the endpoint's cache once the job ended, or 401, its token invalidated by
    the API server because the pod itself was deleted (a loaded run gets there first); 10 s at
    most."""

    def ended() -> bool:
        code, answer = post_state(url, tok, job, state)
        invalidated = code == 401 and "token has been invalidated" in answer.get("message", "")
        return code == 403 or invalidated or (code == 200 and answer["inPlace"]["final"] is True)

    wait_until(ended, 10, message="a final word or a refusal")


def running_pair(
    cluster: Cluster, bed: Bed, url: str, job: str, *, as_real_pods: bool = False
) -> tuple[list[dict[str, Any]], list[str]]:
    """`job`'s two worker pods and their tokens, once both supervisors told `running` in generation
    0 and the status says so. `as_real_pods`: tell `running` only once the wall clock left the
    second the pods were created in, as a real pod's supervisor does (its container starts, then
    torchrun); a kwok pod can otherwise tell within its creation second, which the API's
    one-second dates cannot order against `inPlaceRunningTime`."""
    pods = [worker_pod(cluster, bed.namespace, job, rank) for rank in (0, 1)]
    tokens = [token(bed, pod) for pod in pods]
    if as_real_pods:
        made = max(parse_time(pod["metadata"]["creationTimestamp"]).timestamp() for pod in pods)
        wait_until(lambda: time.time() >= made + 1.0, 5, message="the pods' creation second to pass")
    for tok in tokens:
        accepted(url, tok, job, {"generation": 0, "state": "running"})
    wait_until(lambda: status(cluster, bed.namespace, job).get("inPlaceRunningGeneration") == 0, 20)
    return pods, tokens


@pytest.mark.stand_in(SUPERVISOR_LINK)
def test_a_failure_told_restarts_in_place_once_across_a_failover_and_the_last_one_fails_the_job(
    cluster: Cluster, bed: Bed
) -> None:
    """Two ranks tell their supervisors' states. Rank 1's failure in generation 0 → generation 1,
    counted once (rank 0's late word of the same failure and a new leader hearing it again count
    nothing), no pod deleted; a retriable code restarts in place counted in retriableFailures; with
    `maxRestarts` spent the next failure fails the job and the word says `final`."""
    ns = bed.namespace
    make_job(
        cluster,
        ns,
        bed.queue,
        "ipl",
        failurePolicy={"maxRestarts": 1, "restartMode": "InPlace", "retriableExitCodes": [75]},
    )
    with leader(cluster, bed, "inplace-a") as one:
        pods = [worker_pod(cluster, ns, "ipl", rank) for rank in (0, 1)]
        tokens = [token(bed, pod) for pod in pods]
        uids = pod_uids(cluster, ns, "ipl")
        accepted(one.url, tokens[0], "ipl", {"generation": 0, "state": "waiting"})
        assert post_state(one.url, tokens[0], "ipl", {"generation": 0, "state": "waiting"}) == (
            200,
            {"accepted": True, "message": "ok", "inPlace": {"generation": 0, "final": False, "soon": False}},
        )
        bad = post_state(one.url, tokens[0], "ipl", {"generation": "x", "state": "running"})
        assert bad[0] == 400 and "inPlace" in bad[1]["message"]
        assert post_state(one.url, tokens[0], "other", {"generation": 0, "state": "running"})[0] == 403
        for tok in tokens:
            accepted(one.url, tok, "ipl", {"generation": 0, "state": "running"})
        wait_until(lambda: status(cluster, ns, "ipl").get("inPlaceRunningGeneration") == 0, 20)

        failed = {"generation": 0, "state": "failed", "exitCode": 1}
        assert post_state(one.url, tokens[1], "ipl", failed)[0] == 200
        st = wait_until(lambda: (s := status(cluster, ns, "ipl")).get("inPlaceGeneration") == 1 and s, 20)
        assert (st["restarts"], st["inPlaceRestarts"], st["restartsByReason"]) == (1, 1, {"WorkersFailed": 1})
        answered(one.url, tokens[0], "ipl", failed, {"generation": 1, "final": False, "soon": False})
    with leader(cluster, bed, "inplace-b") as two:  # a failover: the new leader hears it again
        for tok in tokens:
            answered(two.url, tok, "ipl", failed, {"generation": 1, "final": False, "soon": False})
        retriable = {"generation": 1, "state": "failed", "exitCode": 75}
        assert post_state(two.url, tokens[0], "ipl", retriable)[0] == 200
        st = wait_until(lambda: (s := status(cluster, ns, "ipl")).get("inPlaceGeneration") == 2 and s, 20)
        assert (st["restarts"], st["inPlaceRestarts"], st.get("retriableFailures")) == (1, 1, 1)
        assert pod_uids(cluster, ns, "ipl") == uids  # restarts in place delete no pod
        said = wait_until(lambda: len(m := restarted_in_place(cluster, ns, "ipl")) == 2 and m, 10)
        assert "restart 1 of 1, in place (generation 1)" in said[0], said
        assert "retriable failure 1 of 10, in place (generation 2)" in said[1], said

        assert (
            post_state(two.url, tokens[1], "ipl", {"generation": 2, "state": "failed", "exitCode": 1})[0]
            == 200
        )
        st = wait_until(lambda: (s := status(cluster, ns, "ipl")).get("phase") == "Failed" and s, 20)
        failed_cond = next(c for c in st["conditions"] if c["type"] == "Failed")
        assert failed_cond["reason"] == "RestartLimitExceeded" and "node rank 1" in failed_cond["message"]
        assert st["restarts"] == 1  # counted once, never reset
        final_or_refused(two.url, tokens[0], "ipl", {"generation": 2, "state": "failed", "exitCode": 1})


@pytest.mark.stand_in(SUPERVISOR_LINK)
def test_a_pod_replaced_on_a_lost_node_makes_every_rank_restart_into_a_new_rendezvous(
    cluster: Cluster, bed: Bed
) -> None:
    """Rank 1's pod is evicted (what the node lifecycle does to a lost node's pods: the
    DisruptionTarget condition, which the worker Job's podFailurePolicy ignores) → the worker Job
    makes a new pod for rank 1 → its supervisor's first state comes from a new pod → the controller
    names the next generation, not counted as a restart; the survivor is told at its next post.
    The times of each step are printed."""
    ns = bed.namespace
    make_job(cluster, ns, bed.queue, "lost", failurePolicy={"maxRestarts": 1, "restartMode": "InPlace"})
    with leader(cluster, bed, "inplace-c") as one:
        pods, tokens = running_pair(cluster, bed, one.url, "lost")
        started = time.monotonic()
        bed.rest.evict(PODS, pods[1]["metadata"]["name"], ns, uid=pods[1]["metadata"]["uid"])
        replacement = worker_pod(cluster, ns, "lost", 1, not_uids=frozenset({pods[1]["metadata"]["uid"]}))
        running = time.monotonic() - started
        accepted(one.url, token(bed, replacement), "lost", {"generation": 0, "state": "waiting"})
        st = wait_until(lambda: (s := status(cluster, ns, "lost")).get("inPlaceGeneration") == 1 and s, 20)
        told = time.monotonic() - started
        assert not st.get("restarts") and not st.get("inPlaceRestarts"), st  # the node's loss, not a failure
        answered(
            one.url,
            tokens[0],
            "lost",
            {"generation": 0, "state": "running"},
            {"generation": 1, "final": False, "soon": False},
        )
        said = wait_until(lambda: restarted_in_place(cluster, ns, "lost"), 10)
        assert any("the pod of node rank 1 was replaced" in m for m in said), said
        print(f"lost pod: replacement Running after {running:.1f} s, survivors told after {told:.1f} s")


@pytest.mark.stand_in(SUPERVISOR_LINK)
def test_a_replacement_first_heard_by_a_new_leader_still_makes_a_new_rendezvous(
    cluster: Cluster, bed: Bed
) -> None:
    """The leader that heard rank 1's old pod is gone before the replacement's first word: the new
    leader knows the replacement from the status alone (every rank had run generation 0, yet rank
    1 waits for its first word) and names generation 1, not counted as a restart."""
    ns = bed.namespace
    make_job(cluster, ns, bed.queue, "lostfo", failurePolicy={"maxRestarts": 1, "restartMode": "InPlace"})
    with leader(cluster, bed, "inplace-d") as one:
        pods, tokens = running_pair(cluster, bed, one.url, "lostfo")
    bed.rest.evict(PODS, pods[1]["metadata"]["name"], ns, uid=pods[1]["metadata"]["uid"])
    replacement = worker_pod(cluster, ns, "lostfo", 1, not_uids=frozenset({pods[1]["metadata"]["uid"]}))
    with leader(cluster, bed, "inplace-e") as two:
        accepted(two.url, tokens[0], "lostfo", {"generation": 0, "state": "running"})
        waiting = {"generation": 0, "state": "waiting"}
        accepted(two.url, token(bed, replacement), "lostfo", waiting)
        st = wait_until(lambda: (s := status(cluster, ns, "lostfo")).get("inPlaceGeneration") == 1 and s, 20)
        assert not st.get("restarts") and not st.get("inPlaceRestarts"), st
        running = {"generation": 0, "state": "running"}
        answered(two.url, tokens[0], "lostfo", running, {"generation": 1, "final": False, "soon": False})


@pytest.mark.stand_in(SUPERVISOR_LINK)
def test_restarts_count_once_across_in_place_a_recreate_and_a_failover_between_them(
    cluster: Cluster, bed: Bed
) -> None:
    """Restart 1 in place; restart 2 recreates (rank 1's pod itself fails, as when its supervisor
    is killed: a new worker Job, `status.attempt` 1, generation back to 0); a leader failover; the
    old attempt's supervisors tell their failure again (answered `final` or refused, counted nothing); restart
    3 in place in the new attempt. `restarts` ends at 3, never reset, each counted once."""
    ns = bed.namespace
    make_job(cluster, ns, bed.queue, "mixed", failurePolicy={"maxRestarts": 3, "restartMode": "InPlace"})
    failed = {"generation": 0, "state": "failed", "exitCode": 1}
    with leader(cluster, bed, "inplace-f") as one:
        old, old_tokens = running_pair(cluster, bed, one.url, "mixed")
        assert post_state(one.url, old_tokens[1], "mixed", failed)[0] == 200
        wait_until(lambda: status(cluster, ns, "mixed").get("inPlaceGeneration") == 1, 20)
        fail = {
            "kwok.torchrun.ai/outcome": "fail",
            "kwok.torchrun.ai/exit-code": "1",
            "kwok.torchrun.ai/duration": "0s",
        }
        bed.rest.patch(PODS, old[1]["metadata"]["name"], {"metadata": {"annotations": fail}}, ns)
        st = wait_until(lambda: (s := status(cluster, ns, "mixed")).get("restarts") == 2 and s, 60)
        assert (st["inPlaceRestarts"], st.get("inPlaceGeneration", 0)) == (1, 0), st
    old_uids = frozenset(p["metadata"]["uid"] for p in old)
    with leader(cluster, bed, "inplace-g") as two:
        final_or_refused(two.url, old_tokens[0], "mixed", {**failed, "generation": 1})
        new = [worker_pod(cluster, ns, "mixed", rank, not_uids=old_uids) for rank in (0, 1)]
        owner = lambda pod: pod["metadata"]["ownerReferences"][0]["uid"]  # noqa: E731
        assert owner(new[0]) != owner(old[0])  # a new worker Job: the attempt was recreated
        new_tokens = [token(bed, pod) for pod in new]
        for tok in new_tokens:
            accepted(two.url, tok, "mixed", {"generation": 0, "state": "running"})
        assert post_state(two.url, new_tokens[0], "mixed", failed)[0] == 200
        st = wait_until(lambda: (s := status(cluster, ns, "mixed")).get("inPlaceGeneration") == 1 and s, 20)
        assert (st["restarts"], st["inPlaceRestarts"]) == (3, 2), st
        by_reason = st["restartsByReason"]  # the recreate's under the worker Job's own reason
        assert by_reason["WorkersFailed"] == 2 and sum(by_reason.values()) == 3, by_reason
        time.sleep(2 * PERIOD)  # passes that hear the same failure again count nothing
        for tok in new_tokens:
            post_state(two.url, tok, "mixed", failed)
        time.sleep(2 * PERIOD)
        st = status(cluster, ns, "mixed")
        assert (st["restarts"], st["inPlaceRestarts"], st["inPlaceGeneration"]) == (3, 2, 1), st


@pytest.mark.stand_in(SUPERVISOR_LINK)
def test_a_rank_that_succeeded_is_told_final_only_once_every_rank_did(cluster: Cluster, bed: Bed) -> None:
    """A supervisor whose torchrun exited 0 waits for `final` before its pod ends as done: the
    endpoint says it once every rank told `succeeded` in the current generation, not before."""
    ns = bed.namespace
    make_job(cluster, ns, bed.queue, "fin", failurePolicy={"maxRestarts": 1, "restartMode": "InPlace"})
    with leader(cluster, bed, "inplace-h") as one:
        _, tokens = running_pair(cluster, bed, one.url, "fin")
        succeeded = {"generation": 0, "state": "succeeded", "exitCode": 0}
        answered(one.url, tokens[0], "fin", succeeded, {"generation": 0, "final": False, "soon": False})
        answered(one.url, tokens[1], "fin", succeeded, {"generation": 0, "final": True, "soon": False})
        answered(one.url, tokens[0], "fin", succeeded, {"generation": 0, "final": True, "soon": False})


@pytest.mark.stand_in(SUPERVISOR_LINK)
def test_a_pod_that_ran_the_generation_saying_waiting_again_restarts_nothing(
    cluster: Cluster, bed: Bed
) -> None:
    """The program can write its supervisor's state file: rank 1's pod, which ran generation 0,
    says `waiting` again, to a new leader that never heard its old states (the failover path that
    knows a replacement from the status alone). Its pod is older than `inPlaceRunningTime`, so no
    new rendezvous is named and nothing is counted; the word stays generation 0."""
    ns = bed.namespace
    make_job(cluster, ns, bed.queue, "forge", failurePolicy={"maxRestarts": 1, "restartMode": "InPlace"})
    with leader(cluster, bed, "inplace-i") as one:
        _, tokens = running_pair(cluster, bed, one.url, "forge", as_real_pods=True)
    assert status(cluster, ns, "forge").get("inPlaceRunningTime"), status(cluster, ns, "forge")
    with leader(cluster, bed, "inplace-j") as two:
        accepted(two.url, tokens[0], "forge", {"generation": 0, "state": "running"})
        waiting = {"generation": 0, "state": "waiting"}
        answered(two.url, tokens[1], "forge", waiting, {"generation": 0, "final": False, "soon": False})
        time.sleep(2 * PERIOD)  # passes that hear the forged word again name nothing
        answered(two.url, tokens[1], "forge", waiting, {"generation": 0, "final": False, "soon": False})
        st = status(cluster, ns, "forge")
        assert st.get("inPlaceGeneration", 0) == 0 and not st.get("restarts"), st
