"""Gang scheduling proven by placement (SPEC §5), with the real scheduler-plugins Coscheduling and
the real Volcano scheduler.

The control plane's 4 kwok nodes of 8 GPUs hold one worker pod of an 8-GPU queue each. This
module runs scheduler-plugins (built from its module by hack/testbed/build-scheduler-plugins.sh)
beside kube-scheduler: its `scheduler` (kube-scheduler with the Coscheduling plugin, configured
with the module's own `manifests/coscheduling/scheduler-config.yaml`, its profile renamed to the
name a `coscheduling` queue's pods carry) and its `controller` (PodGroup status), with their CRDs
(hack/testbed/scheduler-crds.sh); the scheduler retries a gang it turned away for a resource
gap after 20 s at the latest (`--pod-max-in-unschedulable-pods-duration`, 5 min by default: a
busy cluster retries sooner, on any pod created). Volcano's scheduler
(hack/testbed/build-volcano.sh, with the module's own `volcano-scheduler.conf`) runs for the tests
parametrized with `volcano`,
after its CRDs (Numatopology's among them: without it Volcano waits forever on its cache) and the
`default` Queue our Volcano PodGroups name. Each starts once for this module, when a test first
needs it, and stops at its end, when the CRDs are removed again so the shared control plane is
left as it was found.

What is shown:
- two 3-node jobs submitted together on a coscheduling queue, and on a volcano queue: sampled
  throughout (the pods listed over and over), the two never both have pods bound and no job's
  bound pods ever go back to fewer — so a job seen partly bound is one whose gang is being
  bound, never one left holding part; one runs with all 3 bound, the other waits
  `Unschedulable` quoting the scheduler with none bound, and runs whole once the first is gone;
- the same two jobs with their pods created interleaved (worker Jobs grown one pod at a time,
  alternately): on a `default` queue kube-scheduler binds 2 pods of each and neither ever runs —
  the deadlock — while on a coscheduling or volcano queue one gang takes 3 nodes and the other
  none;
- a job larger than the cluster on a coscheduling queue, and on a volcano queue: no pod is ever
  bound, the reason quotes the scheduler saying why (Coscheduling: the PodGroup's minResources,
  "resource gap", 8 GPUs among it), and deleting it leaves nothing behind;
- an elastic job (2..4 nodes) on a coscheduling queue, and on a volcano queue, starts with 2 when
  only 2 nodes are free, and when the autoscaler grows it the PodGroup's minMember stays 2 and each
  new node is placed by the same scheduler.
The sampled invariants are about the order of states, never about how long anything takes.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from customresources import crd_names, remove_crds
from jobs import make_job, queue_manifest
from summary_notes import NOTE
from testbed import REPO, Cluster, cache_dir, condition, pins, wait_until

from controller.api import JOB_LABEL, ROLE_LABEL
from controller.cmd.main import App
from controller.rest import RESTClient
from controller.rest.resources import PODS
from controller.torchrunjob.manifests.scheduling import COSCHEDULING_SCHEDULER_NAME, VOLCANO_SCHEDULER_NAME

CRD_SCRIPT = REPO / "hack" / "testbed" / "scheduler-crds.sh"
PODGROUP = "podgroups.scheduling.x-k8s.io"
PODGROUPS = {"coscheduling": PODGROUP, "volcano": "podgroups.scheduling.volcano.sh"}
WORKERS = f"{ROLE_LABEL}=worker"

# -- scheduler-plugins, for this module ------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerPlugins:
    version: str
    binaries: Path
    crds: str  # where the CRDs came from (their SOURCE)


def scheduler_plugins_binaries() -> tuple[str, Path]:
    version = pins()["SCHEDULER_PLUGINS_VERSION"]
    return version, cache_dir() / "bin" / f"scheduler-plugins-{version}"


def start(args: list[str], cluster: Cluster, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, env=cluster.env(), stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def scheduler_plugins(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchedulerPlugins]:
    """scheduler-plugins' scheduler and PodGroup controller running beside kube-scheduler."""
    version, binaries = scheduler_plugins_binaries()
    if not (binaries / ".done").exists():
        pytest.skip(
            f"scheduler-plugins is not built: run hack/testbed/build-scheduler-plugins.sh ({binaries})"
        )
    if shutil.which("go") is None:
        pytest.skip("the Go toolchain is needed: scheduler CRDs come from the Go module proxy")
    proc = subprocess.run(
        [str(CRD_SCRIPT), "coscheduling"], capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{CRD_SCRIPT.name} failed: {proc.stderr.strip()[-2000:]}")
    crds = Path(proc.stdout.strip().split("=", 1)[1])
    names = crd_names(crds)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    cluster.wait_established(*names)

    work = tmp_path_factory.mktemp("scheduler-plugins")
    # the module's own configuration for Coscheduling; only its profile's name and the kubeconfig
    # change: it runs as a second scheduler, so it must not take kube-scheduler's pods
    config = yaml.safe_load((binaries / "coscheduling-scheduler-config.yaml").read_text())
    config["clientConnection"]["kubeconfig"] = str(cluster.kubeconfig)
    (profile,) = config["profiles"]
    profile["schedulerName"] = COSCHEDULING_SCHEDULER_NAME
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    # a gang Coscheduling turned away for a resource gap is retried on a pod created or a PodGroup
    # changed, else after this long (5 min by default): in this quiet cluster nothing else comes
    # (manifests/podgroup.py, README)
    requeue = "--pod-max-in-unschedulable-pods-duration=20s"
    scheduler = start(
        [
            str(binaries / "scheduler"),
            "--config",
            str(work / "config.yaml"),
            requeue,
            "--secure-port=0",
            "-v=2",
        ],
        cluster,
        work / "scheduler.log",
    )
    controller = start(
        [
            str(binaries / "controller"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--metricsAddr=0",
            "--probeAddr=0",
        ],
        cluster,
        work / "controller.log",
    )
    try:
        yield SchedulerPlugins(version, binaries, (crds / "SOURCE").read_text().strip())
    finally:
        stop(scheduler)
        stop(controller)
        for name in ("scheduler", "controller"):
            tail = (work / f"{name}.log").read_text(errors="replace").splitlines()[-5:]
            print(f"scheduler-plugins {name} log, last lines:", *tail, sep="\n    ")
        remove_crds(cluster, names)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def volcano(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Volcano's scheduler (built by hack/testbed/build-volcano.sh, with the module's own scheduler
    configuration: gang among its plugins) beside kube-scheduler, after its CRDs: it waits forever
    on a cache of a kind the API server does not serve."""
    version = pins()["VOLCANO_VERSION"]
    binaries = cache_dir() / "bin" / f"volcano-{version}"
    if not (binaries / ".done").exists():
        pytest.skip(f"the Volcano scheduler is not built: run hack/testbed/build-volcano.sh ({binaries})")
    proc = subprocess.run(
        [str(CRD_SCRIPT), "volcano"], capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{CRD_SCRIPT.name} failed: {proc.stderr.strip()[-2000:]}")
    crds = Path(proc.stdout.strip().split("=", 1)[1])
    names = crd_names(crds)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    cluster.wait_established(*names)
    # the queue every Volcano PodGroup of ours names (manifests/podgroup.py)
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"}}
    cluster.apply({**queue, "spec": {"weight": 1, "reclaimable": True}})
    work = tmp_path_factory.mktemp("volcano")
    args = [
        str(binaries / "scheduler"),
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--scheduler-conf",
        str(binaries / "volcano-scheduler.conf"),
        "--leader-elect=false",
        f"--listen-address=127.0.0.1:{free_port()}",
        f"--healthz-address=127.0.0.1:{free_port()}",
        "-v=2",
    ]
    scheduler = start(args, cluster, work / "scheduler.log")
    try:
        source = (crds / "SOURCE").read_text().strip()
        yield f"Volcano {version} (its scheduler, with the gang plugin), CRDs from {source}"
    finally:
        stop(scheduler)
        tail = (work / "scheduler.log").read_text(errors="replace").splitlines()[-5:]
        print("volcano scheduler log, last lines:", *tail, sep="\n    ")
        remove_crds(cluster, names)


@pytest.fixture(autouse=True)
def gang_scheduler(request: pytest.FixtureRequest, record_property: Callable[[str, object], None]) -> str:
    """The gang scheduler a test runs with (its `scheduler` parameter: Volcano for `volcano`,
    scheduler-plugins otherwise), named in the run's summary."""
    wanted = request.getfixturevalue("scheduler") if "scheduler" in request.fixturenames else "coscheduling"
    if wanted == "volcano":
        ran: str = request.getfixturevalue("volcano")
    else:
        plugins: SchedulerPlugins = request.getfixturevalue("scheduler_plugins")
        ran = (
            f"scheduler-plugins {plugins.version} (Coscheduling, schedulerName "
            f"{COSCHEDULING_SCHEDULER_NAME}, and its PodGroup controller; Kubernetes modules "
            f"{pins()['KUBE_VERSION']}), CRDs from {plugins.crds}"
        )
    record_property(NOTE, f"gang scheduler: {ran}")
    return ran


@pytest.fixture
def queues(cluster: Cluster) -> Iterator[Callable[..., str]]:
    """Make TorchrunQueues whose kwok pods keep running; deleted after the test."""
    made: list[str] = []

    def make(scheduler: str, **spec: Any) -> str:
        name = f"q-{uuid.uuid4().hex[:6]}"
        cluster.apply(queue_manifest(name, "run", scheduling={"scheduler": scheduler}, **spec))
        made.append(name)
        return name

    yield make
    if made:
        cluster.kubectl("delete", "torchrunqueue", *made, "--wait=true", "--timeout=60s", check=False)


# -- what the pods look like, sampled --------------------------------------------------------------


def bound(pods: list[dict[str, Any]], job: str) -> int:
    """Pods of `job` that a scheduler bound to a node."""
    return sum(1 for p in pods if p["metadata"]["labels"].get(JOB_LABEL) == job and p["spec"].get("nodeName"))


@dataclass
class Sampler:
    """Lists the namespace's worker pods over and over in a thread: every sample is the number of
    bound pods per job, in order."""

    rest: RESTClient
    namespace: str
    jobs: tuple[str, ...]
    samples: list[dict[str, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.rest.list(PODS, self.namespace, label_selector=WORKERS)["items"]
            self.samples.append({job: bound(pods, job) for job in self.jobs})
            self._stop.wait(0.02)

    def wait_for_samples(self, n: int) -> None:
        """At least `n` more samples, so what follows was seen more than once."""
        have = len(self.samples)
        wait_until(lambda: len(self.samples) >= have + n, 60, 0.05, message=f"{n} more samples")


def exists(cluster: Cluster, kind: str, name: str, ns: str) -> bool:
    return cluster.found(kind, name, "-n", ns)


def job_obj(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get("torchrunjob", name, "-n", ns)


def running(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return condition(job_obj(cluster, ns, name), "Running") or {}


def pods_of(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", f"{JOB_LABEL}={name}")["items"]
    return items


def quotes_the_scheduler(cluster: Cluster, ns: str, name: str) -> str | None:
    """The job's `Running=False Unschedulable` message, when each of its `; `-separated parts is
    exactly what the scheduler wrote on one of its pods (`pod <name>: <PodScheduled message>`)."""
    cond = running(cluster, ns, name)
    if cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
        return None
    said = {
        f"pod {p['metadata']['name']}: {c.get('message')}"
        for p in pods_of(cluster, ns, name)
        if (c := condition(p, "PodScheduled")) and c["status"] == "False"
    }
    message: str = cond["message"]
    rest = message
    while rest:  # parts joined by "; ", which a scheduler's own words may hold too (Volcano's do)
        part = next((p for p in said if rest == p or rest.startswith(p + "; ")), None)
        if part is None:
            return None
        rest = rest[len(part) + 2 :]
    return message


def all_running(cluster: Cluster, ns: str, name: str, nodes: int) -> bool:
    cond = running(cluster, ns, name)
    return cond.get("status") == "True" and bound(pods_of(cluster, ns, name), name) == nodes


def scheduled_by(cluster: Cluster, ns: str, pod: str) -> set[str]:
    """Who reported scheduling `pod` (the `Scheduled` events' reporting controller)."""
    events = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={pod}")["items"]
    return {
        e.get("reportingComponent") or (e.get("source") or {}).get("component", "")
        for e in events
        if e["reason"] == "Scheduled"
    }


def merge_patch(cluster: Cluster, kind: str, name: str, ns: str, patch: dict[str, Any]) -> None:
    cluster.kubectl("patch", kind, name, "-n", ns, "--type=merge", "-p", json.dumps(patch))


def assert_never_split(samples: list[dict[str, int]], size: int) -> None:
    """The gang invariants over a history of samples: a job's bound pods never go down, and
    while one job has pods bound the other has none unless the first is whole (then the other
    may only be on its way to whole too, which 4 nodes cannot hold for two jobs of 3)."""
    assert samples, "no samples"
    for job in samples[0]:
        counts = [s[job] for s in samples]
        assert counts == sorted(counts), f"{job}: bound pods went down: {counts}"
    for s in samples:
        partial = [job for job, n in s.items() if 0 < n < size]
        assert len([n for n in s.values() if n]) <= 1, f"both jobs hold nodes: {s}"
        assert len(partial) <= 1, f"two jobs partly bound: {s}"


# -- the tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", ["coscheduling", "volcano"])
def test_two_gangs_submitted_together_one_runs_whole_the_other_waits_with_none_bound(
    scheduler: str,
    cluster: Cluster,
    namespace: str,
    rest: RESTClient,
    queues: Callable[..., str],
    start_controller: Callable[..., App],
) -> None:
    queue = queues(scheduler)
    start_controller()
    with Sampler(rest, namespace, ("gang-a", "gang-b")) as sampler:
        make_job(cluster, namespace, queue, "gang-a", numNodes=3)
        make_job(cluster, namespace, queue, "gang-b", numNodes=3)

        def winner() -> str | None:
            ready = [j for j in ("gang-a", "gang-b") if all_running(cluster, namespace, j, 3)]
            return ready[0] if len(ready) == 1 else None

        first = wait_until(winner, 120, 0.5, message="one gang runs")
        second = "gang-b" if first == "gang-a" else "gang-a"
        message = wait_until(
            lambda: quotes_the_scheduler(cluster, namespace, second),
            90,
            0.5,
            message=f"{second} Unschedulable, quoting the scheduler",
        )
        sampler.wait_for_samples(20)
        waiting = pods_of(cluster, namespace, second)
        assert len(waiting) == 3 and bound(waiting, second) == 0
        names = {"coscheduling": COSCHEDULING_SCHEDULER_NAME, "volcano": VOLCANO_SCHEDULER_NAME}
        assert all(p["spec"]["schedulerName"] == names[scheduler] for p in waiting)
        assert not all_running(cluster, namespace, second, 3)
        history = list(sampler.samples)
    assert_never_split(history, 3)
    assert history[-1] == {first: 3, second: 0}
    pg = cluster.get(PODGROUPS[scheduler], second, "-n", namespace)
    assert pg["spec"]["minMember"] == 3
    print(f"{second} waited with: {message}; its PodGroup: {pg.get('status')}")

    # the first goes: the second gang is placed, whole
    cluster.kubectl("delete", "torchrunjob", first, "-n", namespace, "--wait=true")
    wait_until(lambda: not pods_of(cluster, namespace, first), 60, 0.5, message=f"{first}'s pods gone")
    with Sampler(rest, namespace, (second,)) as sampler:
        wait_until(lambda: all_running(cluster, namespace, second, 3), 120, 0.5, message=f"{second} runs")
        history = list(sampler.samples)
    counts = [s[second] for s in history]
    assert counts == sorted(counts) and counts[-1] == 3


@pytest.mark.parametrize("scheduler", ["default", "coscheduling", "volcano"])
def test_pods_created_interleaved_deadlock_kube_scheduler_but_not_the_gang(
    scheduler: str,
    cluster: Cluster,
    namespace: str,
    rest: RESTClient,
    queues: Callable[..., str],
    start_controller: Callable[..., App],
) -> None:
    """Both worker Jobs start suspended at 1 pod and grow one pod at a time, alternately, each
    step waited for: kube-scheduler binds each pod as it comes, so 2 of each hold the 4 nodes
    and the third of each can never be placed; a gang scheduler (Coscheduling, Volcano) places
    no pod of a gang until the whole gang fits, so one gang takes 3 nodes and the other none."""
    queue = queues(scheduler)
    start_controller()
    jobs = ("gang-a", "gang-b")
    for name in jobs:
        make_job(cluster, namespace, queue, name, numNodes=3, suspend=True)
    for name in jobs:
        wait_until(lambda n=name: exists(cluster, "job", n, namespace), 60, 0.2, message=f"worker Job {name}")
        merge_patch(cluster, "job", name, namespace, {"spec": {"parallelism": 1}})
        merge_patch(cluster, "torchrunjob", name, namespace, {"spec": {"suspend": False}})

    def step(name: str, pods: int) -> None:
        """`name` has `pods` worker pods; on the default queue each is bound before the next."""
        merge_patch(cluster, "job", name, namespace, {"spec": {"parallelism": pods}})

        def settled() -> bool:
            mine = pods_of(cluster, namespace, name)
            if len(mine) != pods:
                return False
            if scheduler == "default":
                return bound(mine, name) == min(pods, 2)
            # the gang scheduler has looked at every pod: turned it away (too few siblings yet, or
            # no room for the whole gang) or, once the gang is whole and fits, placed it
            return all(condition(p, "PodScheduled") for p in mine)

        wait_until(settled, 60, 0.2, message=f"{name} with {pods} pods settled")

    with Sampler(rest, namespace, jobs) as sampler:
        for pods in (1, 2, 3):
            for name in jobs:
                step(name, pods)
        if scheduler == "default":
            # the deadlock: 2 + 2 nodes held, a pod of each waits for a node the other holds
            for name in jobs:
                wait_until(
                    lambda n=name: quotes_the_scheduler(cluster, namespace, n),
                    60,
                    0.5,
                    message="Unschedulable",
                )
            sampler.wait_for_samples(20)
            assert sampler.samples[-1] == {"gang-a": 2, "gang-b": 2}
            assert not any(all_running(cluster, namespace, n, 3) for n in jobs)
            return
        first = wait_until(
            lambda: next((n for n in jobs if all_running(cluster, namespace, n, 3)), None),
            120,
            0.5,
            message="one gang runs",
        )
        second = jobs[1 - jobs.index(first)]
        wait_until(lambda: quotes_the_scheduler(cluster, namespace, second), 90, 0.5, message="Unschedulable")
        sampler.wait_for_samples(20)
        history = list(sampler.samples)
    assert_never_split(history, 3)
    assert history[-1] == {first: 3, second: 0}


@pytest.mark.parametrize("scheduler", ["coscheduling", "volcano"])
def test_a_gang_larger_than_the_cluster_never_binds_a_pod_and_says_why(
    cluster: Cluster,
    namespace: str,
    rest: RESTClient,
    queues: Callable[..., str],
    start_controller: Callable[..., App],
    scheduler: str,
) -> None:
    queue = queues(scheduler)
    start_controller()

    def says_why(message: str) -> bool:
        if scheduler == "coscheduling":
            # Coscheduling's PreFilter weighs the PodGroup's minResources (5 x 8 GPUs) against the
            # free resources of the whole cluster (4 x 8), printing the gap as Go prints a
            # ResourceList (`nvidia.com/gpu:{{8 0} {<nil>}  DecimalSI}`). Until the Job controller
            # has made all five pods it first says "cannot find enough sibling pods": on a loaded
            # machine the job quoted that, and the quote follows the scheduler's next words
            return "resource gap: " in message and "nvidia.com/gpu:{{8 0}" in message
        # Volcano's gang plugin: the group is short of members it can place, and why
        return "minAvailable" in message or "Insufficient nvidia.com/gpu" in message

    seen: list[str] = []

    def quoted_why() -> str | None:
        message = quotes_the_scheduler(cluster, namespace, "huge")
        if message and message not in seen:
            seen.append(message)
        return message if message and says_why(message) else None

    with Sampler(rest, namespace, ("huge",)) as sampler:
        make_job(cluster, namespace, queue, "huge", numNodes=5)
        try:
            wait_until(quoted_why, 90, 0.5, message="Unschedulable with the scheduler's reason")
        except AssertionError as e:
            raise AssertionError(f"{e}; the job quoted: {seen}") from e
        sampler.wait_for_samples(20)
        history = list(sampler.samples)
    assert len(pods_of(cluster, namespace, "huge")) == 5
    assert all(s["huge"] == 0 for s in history), "a pod of a gang that cannot fit was bound"
    pg = cluster.get(PODGROUPS[scheduler], "huge", "-n", namespace)
    assert pg["spec"]["minMember"] == 5
    if scheduler == "coscheduling":
        assert pg["spec"]["minResources"]["nvidia.com/gpu"] == "40"

    cluster.kubectl("delete", "torchrunjob", "huge", "-n", namespace, "--wait=true")

    def nothing_left() -> bool:
        kinds = f"pods,jobs,services,{PODGROUPS[scheduler]}"
        return not cluster.get(kinds, "-n", namespace, "-l", f"{JOB_LABEL}=huge")["items"]

    wait_until(nothing_left, 60, 0.5, message="everything of the job gone")


@pytest.mark.parametrize("scheduler", ["coscheduling", "volcano"])
def test_an_elastic_gang_starts_at_its_minimum_and_grows_through_the_same_scheduler(
    cluster: Cluster,
    namespace: str,
    queues: Callable[..., str],
    start_controller: Callable[..., App],
    scheduler: str,
) -> None:
    queue = queues(scheduler)
    name = {"coscheduling": COSCHEDULING_SCHEDULER_NAME, "volcano": VOLCANO_SCHEDULER_NAME}[scheduler]
    # a pass a second, and the whole cluster may be used: 4 x 8 GPUs is small for the 0.97 default
    start_controller("--autoscaler-period", "1", "--max-load-desired", "1")
    make_job(cluster, namespace, queue, "rigid", numNodes=2)
    wait_until(lambda: all_running(cluster, namespace, "rigid", 2), 90, 0.5, message="the rigid job runs")

    elastic = {"minNodes": 2, "maxNodes": 4}
    make_job(
        cluster, namespace, queue, "elastic", numNodes=2, elastic=elastic, distributed={"maxRestarts": 3}
    )
    wait_until(lambda: all_running(cluster, namespace, "elastic", 2), 90, 0.5, message="elastic runs with 2")
    pg = cluster.get(PODGROUPS[scheduler], "elastic", "-n", namespace)
    assert pg["spec"]["minMember"] == 2

    # the rigid job goes: the autoscaler grows the elastic job into its two nodes
    cluster.kubectl("delete", "torchrunjob", "rigid", "-n", namespace, "--wait=true")

    def grown() -> bool:
        status = job_obj(cluster, namespace, "elastic").get("status") or {}
        return status.get("nodes") == 4 and all_running(cluster, namespace, "elastic", 4)

    wait_until(grown, 120, 0.5, message="elastic grown to 4")
    pg = cluster.get(PODGROUPS[scheduler], "elastic", "-n", namespace)
    assert pg["spec"]["minMember"] == 2, "the gang is the job's minimum, whatever its size"
    pods = pods_of(cluster, namespace, "elastic")
    assert len(pods) == 4
    for pod in pods:
        assert pod["spec"]["schedulerName"] == name
        pod_name = pod["metadata"]["name"]
        wait_until(
            lambda n=pod_name: scheduled_by(cluster, namespace, n),
            30,
            0.5,
            message=f"{pod_name} Scheduled event",
        )
        assert scheduled_by(cluster, namespace, pod_name) == {name}
    assert len({p["spec"]["nodeName"] for p in pods}) == 4
