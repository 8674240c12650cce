"""Progress reports on the control plane, pushed as the reporter sidecar pushes them: a token
minted by the API server (TokenRequest) for a kwok worker pod, POSTed to the controller's HTTPS
endpoint. Two controller processes with leader election share one namespace: the leader accepts
and writes, the standby answers 503 and writes nothing (the audit log says so).

Proven here: a report becomes status.progress and Progressing; reports that prove nothing — no
token, a token for another audience, a token not bound to a pod, a pod of job B reporting for job
A, a user's pod carrying job A's label — are refused and change nothing; a job whose ranks fall
silent — their heartbeats still arriving — is Stalled after its stallTimeoutSeconds and, with
onStall Restart, restarted once (a Warning Event); an outage of the reports longer than that timeout
is ReportingLost and restarts nothing; a certificate directory replaced under a running controller
is served to the next connection; and 50 reporting jobs cost at most one status write per job per
--progress-period.
"""

from __future__ import annotations

import contextlib
import io
import os
import ssl
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import audit
import pytest
from cryptography import x509
from jobs import make_job, queue_manifest
from reports import Replica, answers, free_port, post, replica, report, token, wait_to_lead, worker_pod
from testbed import Cluster, condition, controller_program, wait_until

from controller.plugin.console import Console
from controller.plugin.main import main as plugin_main
from controller.progress.tls import self_signed
from controller.rest import RESTClient, load_config

PERIOD = 3.0  # --progress-period of both replicas


class Bed(NamedTuple):
    namespace: str
    queue: str
    leader: Replica
    standby: Replica
    rest: RESTClient


@pytest.fixture(scope="module")
def bed(cluster: Cluster, crds: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """A namespace, a queue whose kwok workers run until stopped, and two controller replicas
    (progress-a leads: it is started first and holds the Lease before progress-b starts). Names of
    their own: the audit log is shared by every module a worker runs, and a `replica-b` of another
    module that led there once failed the standby's check here."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    queue = f"q-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(ns)
    cluster.apply(
        queue_manifest(queue, "run", nodeResources={"gpus": 0, "cpus": "20m"}, debug={"stackDumps": True})
    )
    logs = tmp_path_factory.mktemp("progress")
    with contextlib.ExitStack() as stack:
        leader = stack.enter_context(replica(cluster, ns, logs, "progress-a", PERIOD))
        wait_to_lead(cluster, ns, "progress-a")
        standby = stack.enter_context(replica(cluster, ns, logs, "progress-b", PERIOD))
        wait_until(lambda: answers(standby.url), 30, message="progress-b to serve its endpoint")
        yield Bed(ns, queue, leader, standby, RESTClient(load_config(str(cluster.kubeconfig))))
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")
    cluster.delete_namespace(ns)


def job_status(cluster: Cluster, ns: str, job: str) -> dict[str, Any]:
    return dict(cluster.get("torchrunjob", job, "-n", ns).get("status") or {})


class Heartbeats:
    """What the reporters of a job whose step does not move send: the same record, its age
    growing, from every rank, at most every `every` seconds (answers ignored: a deleted pod's
    token is refused, as the real sidecar's would be)."""

    def __init__(
        self, bed: Bed, job: str, pods: list[dict[str, Any]], step: int, age: float, every: float = 2
    ):
        self.bed, self.job, self.step, self.every = bed, job, step, every
        self.tokens = [token(bed, pod) for pod in pods]
        self.changed = time.monotonic() - age
        self.sent = 0.0

    def beat(self) -> None:
        now = time.monotonic()
        if now - self.sent < self.every:
            return
        self.sent = now
        for tok in self.tokens:
            post(self.bed.leader.url, tok, report(self.job, self.step, age=now - self.changed))


def warned(cluster: Cluster, ns: str, job: str, reason: str, words: str = "") -> bool:
    """A Warning Event of `reason` about `job` that says `words`."""
    events = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={job}")["items"]
    return any(e["reason"] == reason and e["type"] == "Warning" and words in e["message"] for e in events)


def test_a_report_becomes_status_progress_and_the_standby_accepts_none(cluster: Cluster, bed: Bed) -> None:
    ns = bed.namespace
    make_job(cluster, ns, bed.queue, "alpha", numNodes=1)
    pod = worker_pod(cluster, ns, "alpha")
    tok = token(bed, pod)
    assert post(bed.standby.url, tok, report("alpha", 42)) == (
        503,
        "not the leader (or its caches are not synced yet): retry",
    )
    assert post(bed.leader.url, tok, report("alpha", 42)) == (200, "ok")
    status = wait_until(
        lambda: (s := job_status(cluster, ns, "alpha")).get("progress") and s, 20, message="status.progress"
    )
    progress = status["progress"]
    assert (progress["step"], progress["totalSteps"], progress["percent"], progress["summary"]) == (
        42,
        100,
        42,
        "42%",
    )
    assert progress["metrics"] == {"loss": 1.5} and progress["rank"] == 0
    cond = condition(cluster.get("torchrunjob", "alpha", "-n", ns), "Progressing")
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "Reporting")
    printed = cluster.kubectl("get", "tj", "alpha", "-n", ns).stdout
    assert "PROGRESS" in printed and "42%" in printed


def test_a_running_job_has_an_eta_and_a_suspended_one_keeps_its_step_but_has_none(
    cluster: Cluster, bed: Bed
) -> None:
    """Issue 31 item 3: an estimate only while the job runs (a failed job showed `ETA 0s`), both
    in `status.progress` and in `kubectl torchrun status`."""
    ns = bed.namespace
    make_job(cluster, ns, bed.queue, "eta", numNodes=1)
    tok = token(bed, worker_pod(cluster, ns, "eta"))
    assert post(bed.leader.url, tok, report("eta", 10, age=10))[0] == 200
    assert post(bed.leader.url, tok, report("eta", 30))[0] == 200  # 2 steps/s: 35 s to step 100
    running = wait_until(
        lambda: (s := job_status(cluster, ns, "eta")).get("progress", {}).get("step") == 30 and s,
        20,
        message="status.progress at step 30",
    )
    assert running["phase"] == "Running" and running["progress"]["eta"], running["progress"]
    assert "ETA " in torchrun_status(cluster, ns, "eta")

    cluster.kubectl(
        "patch", "torchrunjob", "eta", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    suspended = wait_until(
        lambda: (s := job_status(cluster, ns, "eta")).get("phase") == "Suspended" and s,
        30,
        message="Suspended",
    )
    assert suspended["progress"]["step"] == 30 and "eta" not in suspended["progress"], suspended["progress"]
    printed = torchrun_status(cluster, ns, "eta")
    assert "step 30/100" in printed and "ETA" not in printed, printed


def torchrun_status(cluster: Cluster, ns: str, job: str) -> str:
    """`kubectl torchrun status JOB` in-process: its `Progress:` line."""
    out, err = io.StringIO(), io.StringIO()
    code = plugin_main(["--kubeconfig", str(cluster.kubeconfig), "-n", ns, "status", job], Console(out, err))
    assert code == 0, err.getvalue()
    (line,) = [x for x in out.getvalue().splitlines() if x.startswith("Progress:")]
    return line


def test_reports_that_prove_nothing_are_refused(cluster: Cluster, bed: Bed) -> None:
    ns, url = bed.namespace, bed.leader.url
    make_job(cluster, ns, bed.queue, "job-a", numNodes=1)
    make_job(cluster, ns, bed.queue, "job-b", numNodes=1)
    pod_a, pod_b = worker_pod(cluster, ns, "job-a"), worker_pod(cluster, ns, "job-b")
    # a user's pod that carries job A's label: the label never makes a pod ours
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "impostor",
                "labels": {"torchrun-job-name": "job-a", "torchrun.ai/role": "worker"},
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeSelector": {"none": "none"}},
        },
        ns,
    )
    impostor = wait_until(lambda: cluster.get("pod", "impostor", "-n", ns), 10, message="impostor pod")
    cases = {
        "a pod of job B for job A": (token(bed, pod_b), 403, "belongs to TorchrunJob job-b, not job-a"),
        "no token": (None, 401, "no bearer token"),
        "a token for another audience": (
            token(bed, pod_a, audience="https://kubernetes.default.svc"),
            401,
            "",
        ),
        "a token bound to no pod": (token(bed, None), 403, "not bound to a pod"),
        "a user's pod with the job's label": (token(bed, impostor), 403, "not controlled by a worker Job"),
        # refused before any TokenReview (progress/tokens.py): the signature does not verify
        "a forged token": ("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtZSJ9.c2ln", 401, "signature does not verify"),
    }
    answers = {case: post(url, tok, report("job-a", 99)) for case, (tok, _, _) in cases.items()}
    for case, (_, code, says) in cases.items():
        assert answers[case][0] == code and says in answers[case][1], (case, answers[case])
    # nothing was kept: the job's own pod reporting now is the first and only progress it shows
    assert post(url, token(bed, pod_a), report("job-a", 7)) == (200, "ok")
    progress = wait_until(lambda: job_status(cluster, ns, "job-a").get("progress"), 20, message="progress")
    assert progress["step"] == 7
    assert "progress" not in job_status(cluster, ns, "job-b")


def test_a_silent_job_stalls_and_on_stall_restart_restarts_it_once(cluster: Cluster, bed: Bed) -> None:
    ns = bed.namespace
    make_job(
        cluster,
        ns,
        bed.queue,
        "hung",
        numNodes=2,
        progress={"stallTimeoutSeconds": 10, "onStall": "Restart"},
        failurePolicy={"maxRestarts": 1},
    )
    pods = [worker_pod(cluster, ns, "hung", i) for i in (0, 1)]
    for pod in pods:
        assert post(bed.leader.url, token(bed, pod), report("hung", 5, age=2))[0] == 200
    reported = time.monotonic()
    heartbeats = Heartbeats(bed, "hung", pods, step=5, age=2)  # the ranks are alive, the step stuck

    def restarted() -> dict[str, Any] | None:
        heartbeats.beat()
        obj = cluster.get("torchrunjob", "hung", "-n", ns)
        return obj if obj.get("status", {}).get("restarts") == 1 else None

    obj = wait_until(restarted, 10 + 2 * PERIOD + 15, message="the stalled job restarted")
    took = time.monotonic() - reported
    stalled = condition(obj, "Progressing")
    assert stalled is not None and (stalled["status"], stalled["reason"]) == ("False", "Stalled")
    assert "step 5" in stalled["message"] and "silent: rank 0, rank 1" in stalled["message"]
    assert took >= 10 - 2 - 1, f"restarted {took:.1f}s after the last report: before the timeout"

    wait_until(
        lambda: warned(cluster, ns, "hung", "Stalled", "silent: rank 0, rank 1"), 10, message="Stalled"
    )
    wait_until(
        lambda: warned(cluster, ns, "hung", "Restarting", "after: Stalled:"), 10, message="the restart"
    )
    # the new attempt reports: Progressing again, the restart counted once
    fresh = worker_pod(cluster, ns, "hung", 0, not_uids=frozenset(p["metadata"]["uid"] for p in pods))
    assert post(bed.leader.url, token(bed, fresh), report("hung", 1))[0] == 200
    wait_until(
        lambda: (
            (condition(cluster.get("torchrunjob", "hung", "-n", ns), "Progressing") or {}).get("status")
            == "True"
        ),
        20,
        message="Progressing again",
    )
    assert job_status(cluster, ns, "hung")["restarts"] == 1


LOST = 96  # seconds without any report before ReportingLost: two heartbeat periods (33 s) + 30 s


def test_an_outage_of_the_reports_longer_than_the_stall_timeout_is_reporting_lost_and_restarts_nothing(
    cluster: Cluster, bed: Bed
) -> None:
    """Both ranks report, then no report arrives at all — what an expired certificate, a rotated
    CA or an overloaded endpoint does to every job at once — for far longer than the job's
    stallTimeoutSeconds: the job is not Stalled and not restarted (onStall Restart), and once no
    report came for the lost window it says Progressing=Unknown ReportingLost (a Warning). When
    the reports come back, it is Progressing again."""
    ns = bed.namespace
    make_job(
        cluster,
        ns,
        bed.queue,
        "dark",
        numNodes=2,
        progress={"stallTimeoutSeconds": 10, "onStall": "Restart"},
        failurePolicy={"maxRestarts": 1},
    )
    pods = [worker_pod(cluster, ns, "dark", i) for i in (0, 1)]
    tokens = [token(bed, pod) for pod in pods]
    for step in (5, 6):  # training moves, then the outage begins
        for tok in tokens:
            assert post(bed.leader.url, tok, report("dark", step))[0] == 200
    last_report = time.monotonic()

    def progressing() -> dict[str, Any]:
        return condition(cluster.get("torchrunjob", "dark", "-n", ns), "Progressing") or {}

    wait_until(lambda: progressing().get("reason") == "Reporting", 20, message="Progressing=True")
    time.sleep(max(0.0, last_report + 10 + 2 * PERIOD + 5 - time.monotonic()))  # past the stall timeout
    assert progressing().get("status") == "True", progressing()
    lost = wait_until(
        lambda: (c := progressing()).get("reason") == "ReportingLost" and c,
        LOST - (time.monotonic() - last_report) + 2 * PERIOD + 15,
        interval=1,
        message="Progressing=Unknown ReportingLost",
    )
    took = time.monotonic() - last_report
    assert lost["status"] == "Unknown" and "no progress report from any rank for 96s" in lost["message"], lost
    assert "step 6" in lost["message"] and "no action is taken" in lost["message"], lost
    assert took >= LOST - 2, f"lost {took:.1f}s after the last report: before the window"
    status = job_status(cluster, ns, "dark")
    assert not status.get("restarts") and status.get("phase") == "Running", status
    assert [worker_pod(cluster, ns, "dark", i)["metadata"]["uid"] for i in (0, 1)] == [
        p["metadata"]["uid"] for p in pods
    ], "a worker pod was replaced"
    wait_until(lambda: warned(cluster, ns, "dark", "ReportingLost", "step 6"), 10, message="the Warning")
    assert not warned(cluster, ns, "dark", "Stalled") and not warned(cluster, ns, "dark", "Restarting")
    # the outage ends: the reports say training went on meanwhile
    for tok in tokens:
        assert post(bed.leader.url, tok, report("dark", 90, age=1))[0] == 200
    wait_until(
        lambda: progressing().get("reason") == "Reporting", 2 * PERIOD + 10, message="Progressing again"
    )
    assert progressing()["status"] == "True" and not job_status(cluster, ns, "dark").get("restarts")


def served(port: int) -> str:
    """The common name of the certificate a new TLS connection to `port` is served."""
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=5)
    return str(x509.load_pem_x509_certificate(pem.encode()).subject.rfc4514_string())


def test_a_progress_cert_dir_replaced_while_running_is_served(
    cluster: Cluster, crds: Path, namespace: str, tmp_path: Path
) -> None:
    """The controller program with --progress-cert-dir laid out as the kubelet mounts a Secret
    (`tls.crt -> ..data/tls.crt`): cert-manager renews it, the kubelet swaps `..data` — the next
    connection is served the new certificate, with no restart, and still answers."""
    certs = tmp_path / "certs"
    for name in ("first", "second"):
        cert, key = self_signed(subject=name)
        (certs / f"..{name}").mkdir(parents=True)
        (certs / f"..{name}" / "tls.crt").write_bytes(cert)
        (certs / f"..{name}" / "tls.key").write_bytes(key)
    os.symlink("..first", certs / "..data")
    for file in ("tls.crt", "tls.key"):
        os.symlink(f"..data/{file}", certs / file)
    port = free_port()
    flags = (f"--progress-bind-address=127.0.0.1:{port}", f"--progress-cert-dir={certs}")
    url = f"https://127.0.0.1:{port}/v1/progress"
    with controller_program(cluster.kubeconfig, namespace, tmp_path / "controller.log", *flags):
        wait_until(lambda: answers(url), 30, message="the endpoint to serve")
        assert served(port) == "CN=first"
        os.symlink("..second", certs / "..data_tmp")
        os.replace(certs / "..data_tmp", certs / "..data")  # the kubelet's atomic update
        assert served(port) == "CN=second"
        assert post(url, None, {})[0] in (401, 503)  # and it answers over it


def test_fifty_reporting_jobs_cost_at_most_one_status_write_per_job_per_period(
    cluster: Cluster, bed: Bed, record_property: Any
) -> None:
    """Each of 50 one-node jobs reports a new step every second (or as fast as two busy cores
    send them) 8 times: the leader writes each job's status at most once per --progress-period
    (3 s) in that window (by the audit log: every
    write the API server received), ends at the last step sent, and then writes nothing more; the
    standby wrote nothing all along (this module's whole run)."""
    ns = bed.namespace
    names = [f"many-{i:02d}" for i in range(50)]
    for name in names:
        make_job(cluster, ns, bed.queue, name, numNodes=1)
    tokens = {name: token(bed, worker_pod(cluster, ns, name)) for name in names}
    wait_until(
        lambda: all(
            (condition(j, "Running") or {}).get("status") == "True"
            for j in cluster.get("torchrunjobs", "-n", ns)["items"]
            if j["metadata"]["name"] in tokens
        ),
        60,
        message="all 50 running",
    )
    time.sleep(PERIOD)  # the Running writes are behind us
    started = datetime.now().astimezone()
    window = 8
    for second in range(window):
        tick = time.monotonic()
        for name in names:
            assert post(bed.leader.url, tokens[name], report(name, second + 1))[0] == 200
        time.sleep(max(0.0, 1 - (time.monotonic() - tick)))
    stopped = datetime.now().astimezone()
    wait_until(
        lambda: all(
            (j.get("status", {}).get("progress") or {}).get("step") == window
            for j in cluster.get("torchrunjobs", "-n", ns)["items"]
            if j["metadata"]["name"] in tokens
        ),
        2 * PERIOD + 10,
        message="every job at the last step",
    )
    settled = datetime.now().astimezone()
    time.sleep(2 * PERIOD)  # quiet: nothing changed, so nothing is written
    audit.flush(cluster, ns)
    writes = [
        e
        for e in audit.events(cluster, ns)
        if audit.ref(e).get("resource") == "torchrunjobs"
        and audit.ref(e).get("subresource") == "status"
        and e.get("verb") in ("update", "patch")
        and e.get("stage") == "ResponseComplete"
        and str(e.get("userAgent", "")).startswith("torchrun-controller")
        and audit.ref(e).get("name") in tokens
    ]
    during = Counter(audit.ref(e)["name"] for e in writes if started <= audit.received(e) <= stopped)
    elapsed = (stopped - started).total_seconds()
    # writes are decided at least a period apart; the API server receives them up to ~1 s later
    bound = int((elapsed + 1.0) // PERIOD) + 1
    assert max(during[n] for n in names) <= bound, (bound, during)
    assert sum(during.values()) >= len(names) * 2, f"progress was hardly written: {during}"
    late = [audit.ref(e)["name"] for e in writes if audit.received(e) > settled]
    assert late == [], f"written with nothing new to say: {late}"
    standby = [
        e
        for e in audit.events(cluster, bed.standby.identity)
        if e.get("userAgent", "").endswith(f"/{bed.standby.identity}")
        and e.get("verb") not in ("get", "list", "watch")
    ]
    assert standby == [], standby
    record_property(
        "note",
        f"50 jobs × {window} reports in {elapsed:.1f}s: at most {max(during.values())} status writes per job "
        f"(bound {bound}, period {PERIOD:g}s), {sum(during.values())} in all; the standby wrote nothing",
    )


def stack(cluster: Cluster, ns: str, *args: str) -> tuple[int, str, str]:
    """`kubectl torchrun stack ARGS` in-process, as a user would run it."""
    out, err = io.StringIO(), io.StringIO()
    code = plugin_main(["--kubeconfig", str(cluster.kubeconfig), "-n", ns, "stack", *args], Console(out, err))
    return code, out.getvalue(), err.getvalue()


def test_stack_answers_in_one_line_when_it_cannot_dump(cluster: Cluster, bed: Bed) -> None:
    """No such job, a queue that does not allow stack dumps (the default), no running worker for
    the rank: each is one line and a non-zero exit, nothing on stdout."""
    ns = bed.namespace
    locked = f"q-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        queue_manifest(locked, "run", nodeResources={"gpus": 0, "cpus": "20m"})  # off by default
    )
    try:
        make_job(cluster, ns, locked, "locked", numNodes=1)
        make_job(cluster, ns, bed.queue, "open", numNodes=1)
        worker_pod(cluster, ns, "open")
        answers = {
            "missing": stack(cluster, ns, "nosuchjob"),
            "locked": stack(cluster, ns, "locked"),
            "no rank 3": stack(cluster, ns, "open", "--rank", "3"),
        }
        assert "nosuchjob" in answers["missing"][2]
        assert f"queue {locked} does not allow stack dumps" in answers["locked"][2]
        assert "job open has no running worker pod for rank 3" in answers["no rank 3"][2]
        for case, (code, out, err) in answers.items():
            assert code != 0 and out == "" and len(err.strip().splitlines()) == 1, (case, out, err)
    finally:
        cluster.kubectl("delete", "torchrunqueue", locked, "--wait=false")


def training_started(pods: list[dict[str, Any]]) -> datetime:
    """The workers' start as the controller counts it: the newest start of their `torchrun`
    containers (whole seconds, as the API keeps times)."""
    starts = [
        c["state"]["running"]["startedAt"]
        for pod in pods
        for c in pod["status"]["containerStatuses"]
        if c["name"] == "torchrun"
    ]
    return max(datetime.fromisoformat(s.replace("Z", "+00:00")) for s in starts)


def test_a_start_that_hangs_before_its_first_step_is_startup_stalled_and_a_silent_job_is_never_stalled(
    cluster: Cluster, bed: Bed
) -> None:
    """Issue 33's startup hangs. `slow` sets startupTimeoutSeconds 10 and onStall Restart: rank 0's
    program reports (a record without a step) and hangs before its first step, rank 1 never
    writes a record — StartupStalled within the timeout plus one period of the workers' start,
    naming both kinds of silence, by the timer alone (no report comes to enqueue the job), and
    restarted once; its next attempt steps and is Progressing again. `mute` has a stall timeout
    and onStall Restart but no startup timeout, and its program never reports: never stalled."""
    ns = bed.namespace
    restart = {"onStall": "Restart"}
    make_job(cluster, ns, bed.queue, "mute", progress={"stallTimeoutSeconds": 10, **restart})
    make_job(
        cluster,
        ns,
        bed.queue,
        "slow",
        progress={"startupTimeoutSeconds": 10, **restart},
        failurePolicy={"maxRestarts": 1},
    )
    pods = [worker_pod(cluster, ns, "slow", i) for i in (0, 1)]
    stepless = {"job": "slow", "record": {"total_steps": 100}, "secondsSinceChange": 0}
    assert post(bed.leader.url, token(bed, pods[0]), stepless)[0] == 200
    started = training_started(pods)

    def restarted() -> dict[str, Any] | None:
        obj = cluster.get("torchrunjob", "slow", "-n", ns)
        return obj if obj.get("status", {}).get("restarts") == 1 else None

    obj = wait_until(restarted, 10 + PERIOD + 20, message="the start-stalled job restarted")
    stalled = condition(obj, "Progressing")
    assert stalled is not None and (stalled["status"], stalled["reason"]) == ("False", "StartupStalled")
    assert stalled["message"].endswith("never reported: rank 1; reported no step: rank 0"), stalled
    took = (
        datetime.fromisoformat(stalled["lastTransitionTime"].replace("Z", "+00:00")) - started
    ).total_seconds()
    assert 10 - 1 <= took <= 10 + PERIOD + 1, f"StartupStalled {took:.0f}s after the workers' start"
    wait_until(
        lambda: warned(cluster, ns, "slow", "StartupStalled", "never reported: rank 1"),
        10,
        message="the StartupStalled Warning",
    )
    wait_until(
        lambda: warned(cluster, ns, "slow", "Restarting", "after: StartupStalled:"), 10, message="the restart"
    )
    # the new attempt steps within its startup timeout: Progressing again, the restart counted once
    fresh = worker_pod(cluster, ns, "slow", 0, not_uids=frozenset(p["metadata"]["uid"] for p in pods))
    assert post(bed.leader.url, token(bed, fresh), report("slow", 1))[0] == 200
    wait_until(
        lambda: (
            (condition(cluster.get("torchrunjob", "slow", "-n", ns), "Progressing") or {}).get("reason")
            == "Reporting"
        ),
        20,
        message="Progressing again",
    )
    assert job_status(cluster, ns, "slow")["restarts"] == 1

    # `mute` ran silent for longer than its stall timeout plus two periods: nothing is claimed
    mute_started = training_started([worker_pod(cluster, ns, "mute", i) for i in (0, 1)])
    wait = (mute_started - datetime.now(mute_started.tzinfo)).total_seconds() + 10 + 2 * PERIOD + 5
    time.sleep(max(0.0, wait))
    mute = cluster.get("torchrunjob", "mute", "-n", ns)
    assert condition(mute, "Progressing") is None, condition(mute, "Progressing")
    assert not mute["status"].get("restarts") and mute["status"].get("phase") == "Running", mute["status"]
    assert not any(warned(cluster, ns, "mute", why) for why in ("Stalled", "StartupStalled", "Restarting"))
