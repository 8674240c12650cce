"""Schedulers on the real control plane (SPEC §3 TorchrunQueue, §5): queue readiness, the KAI Queue
tree, PodGroups per job, Kueue's suspend flow, and what happens when a scheduler is missing.

Each scheduler's CRDs come from its own Go module (hack/testbed/scheduler-crds.sh, cached); KAI's
module is not served by the proxy, so its CRDs are a stand-in typed exactly from the fields we
write (`TestKaiCrdContract` shows it refuses anything else; every KAI test is listed under
"stand-ins" in the run's summary). The tests of missing schedulers and invalid queues run first,
on a control plane without them (`no_scheduler_apis` removes any scheduler CRDs an earlier module
or run left, so no other module's order matters); then they are installed once for the rest of
this module and removed again at its end (waiting until the API server no longer serves them), so
the shared control plane is left without them.
What runs: kube-scheduler, and the real Kueue in `TestRealKueue` (built from its module by
hack/testbed/build-kueue.sh; it skips, saying so, when not built). No KAI, coscheduling or Volcano
scheduler runs, so their tests prove objects and linkage (the PodGroup, its owner, how the pods
name it), never that a gang is placed all at once. `TestKueueContract` makes Kueue's moves itself
through the API and checks the controller's side of the contract.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from customresources import api_served, crd_names, crds_of_groups, release_instances, remove_crds, served
from jobs import condition, make_job, queue_manifest, rest_requests
from summary_notes import KUEUE, STAND_IN
from testbed import REPO, Cluster, cache_dir, pins, shown_on_failure, wait_until

from controller.api import TorchrunJob, TorchrunQueue, resolve_topology
from controller.api.kueue import workloads_served
from controller.cmd.main import App
from controller.rest import RESTClient
from controller.rest.errors import ApiError
from controller.torchrunjob.manifests.podgroup import KAI_POD_GROUPS, build_pod_group
from controller.torchrunqueue.controller import SCHEDULER_APIS
from controller.torchrunqueue.kaiqueue import build_kai_queue

CRD_SCRIPT = REPO / "hack" / "testbed" / "scheduler-crds.sh"
KAI_QUEUES = "queues.scheduling.run.ai"
KAI_PODGROUPS = "podgroups.scheduling.run.ai"
STAND_IN_ANNOTATION = "torchrun.ai/stand-in"  # on the stand-in's CRDs (hack/testbed/kai-crds-standin.yaml)
Maker = Callable[..., str]
Record = Callable[[str, object], None]

# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def scheduler_crds() -> dict[str, Path]:
    """Where each scheduler's CRDs are cached, fetched through the Go module proxy once."""
    if shutil.which("go") is None:
        pytest.skip("the Go toolchain is needed: scheduler CRDs come from the Go module proxy")
    proc = subprocess.run([str(CRD_SCRIPT)], capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{CRD_SCRIPT.name} failed: {proc.stderr.strip()[-2000:]}")
    return {k: Path(v) for k, v in (line.split("=", 1) for line in proc.stdout.split())}


@pytest.fixture(scope="module")
def scheduler_apis(cluster: Cluster, scheduler_crds: dict[str, Path]) -> Iterator[dict[str, str]]:
    """Every scheduler's CRDs, installed once for the tests that need them and removed afterwards
    (one removal: each round of CRD deletion can cost the API server minutes, see `remove_crds`)."""
    names = [n for d in scheduler_crds.values() for n in crd_names(d)]
    for directory in scheduler_crds.values():
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(directory))
    cluster.wait_established(*names)
    try:
        yield {k: (d / "SOURCE").read_text().strip() for k, d in scheduler_crds.items()}
    finally:
        remove_crds(cluster, names)


@pytest.fixture(scope="module")
def no_scheduler_apis(cluster: Cluster) -> None:
    """No scheduler's API is served when the tests of missing schedulers start, whatever ran before
    on this control plane: scheduler CRDs that an earlier module (or an interrupted run) left are
    removed here, their objects' finalizers first (no scheduler runs to release them), and
    discovery is waited on until it no longer serves any API a scheduler needs. Nothing to do,
    and no time spent, on a control plane that has none."""
    versions = [gv for apis, _ in SCHEDULER_APIS.values() for alts in apis for gv in alts]
    left = crds_of_groups(cluster, {gv.split("/")[0] for gv in versions})
    if left:
        release_instances(cluster, left)
        remove_crds(cluster, left)
    wait_until(
        lambda: not [gv for gv in versions if api_served(cluster, gv)],
        60,
        message="no scheduler API served",
    )


@pytest.fixture
def make_queue(cluster: Cluster, crds: Path) -> Iterator[Maker]:
    """Create TorchrunQueues (cluster-scoped); deleted again after the test."""
    created: list[str] = []

    def make(outcome: str = "run", **spec: Any) -> str:
        name = f"q-{uuid.uuid4().hex[:6]}"
        body = queue_manifest(name, outcome, "2s", **spec)
        cluster.apply(body)
        created.append(name)
        return name

    yield make
    if created:
        cluster.kubectl("delete", "torchrunqueue", *created, "--wait=true", "--timeout=60s", check=False)


@pytest.fixture
def priority_class(cluster: Cluster) -> Iterator[str]:
    name = f"train-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 1000,
        }
    )
    yield name
    cluster.kubectl("delete", "priorityclass", name, check=False)


# -- helpers -------------------------------------------------------------------------------------


def queue_condition(cluster: Cluster, queue: str, ctype: str, reason: str) -> dict[str, Any] | None:
    """The queue once its `ctype` condition has `reason`."""
    obj = cluster.get("torchrunqueue", queue)
    c = condition(obj, ctype)
    return obj if c and c["reason"] == reason else None


def job_condition(
    cluster: Cluster, ns: str, ctype: str, reason: str, name: str = "train", says: str = ""
) -> dict[str, Any]:
    """The job once its `ctype` condition has `reason` and a message containing `says`: a job whose
    queue changed is told so on its next pass, a moment after the queue's status (a job seen first
    beside a queue without a status yet waits as QueueNotReady "not Ready yet")."""

    def check() -> dict[str, Any] | None:
        obj = cluster.get("torchrunjob", name, "-n", ns)
        c = condition(obj, ctype)
        return obj if c and c["reason"] == reason and says in c.get("message", "") else None

    return wait_until(check, 60, message=f"job {ctype}={reason} saying {says!r}")


def wait_reason(cluster: Cluster, queue: str, ctype: str, reason: str, timeout: float = 60) -> dict[str, Any]:
    return wait_until(
        lambda: queue_condition(cluster, queue, ctype, reason),
        timeout,
        0.2,
        message=f"{queue} {ctype}={reason}",
    )


def get_or_none(cluster: Cluster, *args: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def merge_patch(cluster: Cluster, kind: str, name: str, patch: dict[str, Any], *ns: str) -> None:
    cluster.kubectl("patch", kind, name, *ns, "--type=merge", "-p", json.dumps(patch))


def controller_owner(obj: dict[str, Any]) -> tuple[str, str] | None:
    """The kind and UID of the object's controller owner reference."""
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
    return (refs[0]["kind"], refs[0]["uid"]) if refs else None


def worker_pods(cluster: Cluster, ns: str, name: str = "train") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", f"torchrun-job-name={name}")["items"]
    return items


def reads(app: App, resource: str) -> float:
    """GET and LIST requests for `resource` (watches are not reads: an informer lists once)."""
    return rest_requests(app, resource, ("get", "list"))


def reconciles(app: App, controller: str, result: str | None = None) -> float:
    """Passes of `controller` that finished (with this result: success, requeue, error, ...)."""
    return sum(
        s.value
        for metric in app.metrics.reconcile_total.collect()
        for s in metric.samples
        if s.name.endswith("_total")
        and s.labels.get("controller") == controller
        and result in (None, s.labels.get("result"))
    )


def settled(app: App, controller: str) -> bool:
    """Nothing of `controller` is queued or being reconciled: its workqueue is empty and its
    active-workers gauge is 0, twice in a row around a pass count that did not move. Keys parked
    for a later retry do not count: they are not due yet."""

    def idle() -> bool:
        workers = sum(
            s.value
            for metric in app.metrics.active_workers.collect()
            for s in metric.samples
            if s.labels.get("controller") == controller
        )
        queue = {"torchrunjob": app.job_controller, "torchrunqueue": app.queue_controller}[controller].queue
        return workers == 0 and queue.len() == 0

    passes = reconciles(app, controller)
    if not idle():
        return False
    time.sleep(0.2)  # a key taken off the queue is counted as active a moment later
    return idle() and reconciles(app, controller) == passes


def wait_settled(app: App, controller: str, timeout: float = 30) -> None:
    wait_until(lambda: settled(app, controller), timeout, message=f"the {controller} controller settles")


def force_passes(app: App, cluster: Cluster, controller: str, kind: str, name: str, *ns: str) -> None:
    """Make the controller reconcile `kind`/`name` a few more times: each label edit is an event;
    returns once every pass they caused has finished."""
    for i in range(5):
        done = reconciles(app, controller)
        merge_patch(cluster, kind, name, {"metadata": {"labels": {"example.com/pass": str(i)}}}, *ns)
        wait_until(lambda d=done: reconciles(app, controller) > d, 30, message=f"a {controller} reconcile")
    wait_settled(app, controller)


# -- no scheduler installed ----------------------------------------------------------------------


@pytest.mark.usefixtures("no_scheduler_apis")
class TestMissingSchedulers:
    """Runs before this module installs any scheduler CRD, and after `no_scheduler_apis` removed
    any that ran before left: a missing scheduler is a condition, not a crash."""

    def test_each_missing_scheduler_is_reported_and_its_jobs_wait(
        self, cluster: Cluster, namespace: str, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        for crd in (
            KAI_QUEUES,
            "workloads.kueue.x-k8s.io",
            "podgroups.scheduling.x-k8s.io",
            "podgroups.scheduling.volcano.sh",
        ):
            assert not served(cluster, crd), f"{crd} must not be installed for this test"
        queues = {
            "kai-scheduler": ("scheduling.run.ai/v2", make_queue(scheduling={"scheduler": "kai-scheduler"})),
            "kueue": ("kueue.x-k8s.io/v1beta1", make_queue(scheduling={"scheduler": "kueue"})),
            "coscheduling": (
                "scheduling.x-k8s.io/v1alpha1",
                make_queue(scheduling={"scheduler": "coscheduling"}),
            ),
            "volcano": ("scheduling.volcano.sh/v1beta1", make_queue(scheduling={"scheduler": "volcano"})),
        }
        plain = make_queue(outcome="run")
        start_controller()
        make_job(cluster, namespace, queues["kai-scheduler"][1])
        make_job(cluster, namespace, plain, name="plain")

        for scheduler, (api, name) in queues.items():
            obj = wait_reason(cluster, name, "Ready", "SchedulerNotInstalled")
            ready = condition(obj, "Ready")
            assert ready is not None and ready["status"] == "False"
            assert api in ready["message"] and scheduler in ready["message"]
            assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        kai = condition(cluster.get("torchrunqueue", queues["kai-scheduler"][1]), "KaiQueueReady")
        assert kai is not None and (kai["status"], kai["reason"]) == ("False", "KaiNotInstalled")
        assert condition(cluster.get("torchrunqueue", queues["volcano"][1]), "KaiQueueReady") is None

        job_condition(cluster, namespace, "Admitted", "QueueNotReady", says="SchedulerNotInstalled")
        assert get_or_none(cluster, "job", "train", "-n", namespace) is None
        # nothing crashed: the controller carries on with everything else
        job_condition(cluster, namespace, "Running", "AllWorkersRunning", name="plain")


# -- invalid queues ------------------------------------------------------------------------------


class TestInvalidQueues:
    def test_bad_quantity_and_unknown_scheduler_are_rejected_at_admission(
        self, cluster: Cluster, crds: Path
    ) -> None:
        base = {"apiVersion": "torchrun.ai/v1alpha1", "kind": "TorchrunQueue", "metadata": {"name": "q-bad"}}
        spec = {"nodeResources": {"gpus": 8}, "image": "img:1"}
        cases = {
            "spec.scheduling.scheduler": {**spec, "scheduling": {"scheduler": "slurm"}},
            "spec.nodeResources.memory": {**spec, "nodeResources": {"gpus": 8, "memory": "lots"}},
            "spec.quota.gpu.quota": {
                **spec,
                "scheduling": {"scheduler": "kai-scheduler"},
                "quota": {"gpu": {"quota": "-1"}},
            },
        }
        for field, bad in cases.items():
            proc = cluster.kubectl("apply", "-f", "-", input=json.dumps({**base, "spec": bad}), check=False)
            assert proc.returncode != 0 and field in proc.stderr, (field, proc.stderr)

    def test_invalid_queue_holds_its_jobs_until_fixed(
        self, cluster: Cluster, namespace: str, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        # 8 GPUs x 200Gi of /dev/shm is more than the node's 900Gi: a quantity only the controller can judge
        queue = make_queue(storage={"shmSizePerGPU": "200Gi"})
        start_controller()
        make_job(cluster, namespace, queue)
        obj = wait_reason(cluster, queue, "Ready", "InvalidSpec")
        assert "spec.storage.shmSizePerGPU" in (condition(obj, "Ready") or {})["message"]
        job_condition(cluster, namespace, "Admitted", "QueueNotReady", says="spec.storage.shmSizePerGPU")
        wait_until(
            lambda: (
                cluster.get("torchrunqueue", queue)["status"]["jobs"]
                == {**zero_counts(), "pending": 1, "total": 1}
            ),
            30,
            message="job counts",
        )

        merge_patch(cluster, "torchrunqueue", queue, {"spec": {"storage": {"shmSizePerGPU": "8Gi"}}})
        fixed = wait_reason(cluster, queue, "Ready", "Ready")
        assert fixed["status"]["observedGeneration"] == fixed["metadata"]["generation"]
        job_condition(cluster, namespace, "Running", "AllWorkersRunning")
        wait_until(
            lambda: cluster.get("torchrunqueue", queue)["status"]["jobs"]["running"] == 1,
            30,
            message="running count",
        )


def zero_counts() -> dict[str, int]:
    return dict.fromkeys(("pending", "syncing", "running", "suspended", "succeeded", "failed", "total"), 0)


# -- a scheduler installed after the controller started ------------------------------------------


@pytest.mark.usefixtures("no_scheduler_apis")
class TestSchedulerInstalledLater:
    """Runs before the scheduler CRDs are installed (and after `no_scheduler_apis`): this test
    installs them itself, mid-way."""

    def test_pod_group_api_installed_later_is_picked_up_and_read_from_a_cache(
        self,
        request: pytest.FixtureRequest,
        cluster: Cluster,
        namespace: str,
        make_queue: Maker,
        start_controller: Callable[..., App],
    ) -> None:
        crd = "podgroups.scheduling.x-k8s.io"
        assert not served(cluster, crd), f"{crd} must not be installed when this test starts"
        queue = make_queue(scheduling={"scheduler": "coscheduling"})
        app = start_controller()
        make_job(cluster, namespace, queue)
        wait_reason(cluster, queue, "Ready", "SchedulerNotInstalled")
        job_condition(cluster, namespace, "Admitted", "QueueNotReady")

        request.getfixturevalue("scheduler_apis")  # every scheduler's CRDs, from now on
        # discovery answers are cached for 30 s and a queue that is not Ready looks again every 10 s
        wait_reason(cluster, queue, "Ready", "Ready", timeout=90)
        pg = wait_until(lambda: get_or_none(cluster, crd, "train", "-n", namespace), 60, message="PodGroup")
        tj = cluster.get("torchrunjob", "train", "-n", namespace)
        assert pg["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]
        # its pods are made (no scheduler-plugins runs in this module to place them: test_gang.py)
        wait_until(lambda: len(worker_pods(cluster, namespace)) == 2, 60, message="the worker pods")

        # the job's passes read its PodGroup from the informer started just now, not the API
        before = reads(app, crd)
        force_passes(app, cluster, "torchrunjob", "torchrunjob", "train", "-n", namespace)
        assert reads(app, crd) == before
        assert get_or_none(cluster, crd, "train", "-n", namespace)["metadata"]["uid"] == pg["metadata"]["uid"]


# -- KAI-Scheduler -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KaiApi:
    """Which KAI CRDs the API server serves: KAI's own, or the stand-in of this repository."""

    source: str  # hack/testbed/scheduler-crds.sh's SOURCE line
    stand_in: bool  # the served CRDs carry the stand-in's marker annotation


@pytest.fixture
def kai_api(cluster: Cluster, scheduler_apis: dict[str, str], record_property: Record) -> KaiApi:
    """The KAI CRDs as served, checked against what the CRD script says it installed; when they are
    the stand-in, the run's summary says so under this test ("stand-ins", test/summary_notes.py)."""
    source = scheduler_apis["kai"]
    marked = {
        crd: cluster.get("crd", crd)["metadata"].get("annotations", {}).get(STAND_IN_ANNOTATION) == "true"
        for crd in (KAI_QUEUES, KAI_PODGROUPS)
    }
    stand_in = source.startswith("stand-in")
    # the report below is only as true as this: what the API server serves is what the script says
    assert marked == dict.fromkeys(marked, stand_in), (source, marked)
    if stand_in:
        record_property(
            STAND_IN,
            "KAI-Scheduler's CRDs: hack/testbed/kai-crds-standin.yaml, typed from the fields we write "
            f"(not KAI's own CRDs; no KAI scheduler runs): {source}",
        )
    return KaiApi(source, stand_in)


def kai_objects_we_write(namespace: str) -> list[dict[str, Any]]:
    """A KAI Queue and a KAI PodGroup as the controller's builders make them, with every field they
    can write set (parent queue, all three resources with quota, limit and weight, priority)."""
    queue = TorchrunQueue.from_json(
        {
            "metadata": {"name": "q-contract", "uid": "q-uid"},
            "spec": {
                "nodeResources": {"gpus": 8, "cpus": "96", "memory": "1Ti"},
                "image": "img:1",
                "scheduling": {"scheduler": "kai-scheduler", "priorityClassName": "high"},
                "kaiQueue": f"contract-{namespace}",
                "parentKaiQueue": "contract-root",
                "quota": {
                    "gpu": {"quota": "16", "limit": "32", "overQuotaWeight": 2},
                    "cpu": {"quota": "100", "limit": "200"},
                    "memory": {"quota": "1Ti", "limit": "2Ti"},
                },
            },
        }
    )
    job = TorchrunJob.from_json(
        {
            "metadata": {"name": "train", "namespace": namespace, "uid": "j-uid"},
            "spec": {"jobQueue": "q-contract", "numNodes": 3, "command": "python train.py"},
        }
    )
    built = build_pod_group(job, queue, resolve_topology(job.spec, queue.spec.node_resources))
    assert built is not None and built[0] == KAI_POD_GROUPS
    return [build_kai_queue(queue), built[1]]


def strict_dry_run(cluster: Cluster, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Create `obj` with server-side dry run and strict field validation: an unknown field is an
    error, where the default validation would drop it with a warning."""
    return cluster.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-",
        input=json.dumps(obj), check=False,
    )  # fmt: skip


def with_spec(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**obj, "spec": {**obj["spec"], **fields}}


@pytest.mark.usefixtures("scheduler_apis")
class TestKaiCrdContract:
    """What the KAI tests below can catch: the KAI CRDs served (KAI's own, or the stand-in typed
    from the fields we write, `hack/testbed/kai-crds-standin.yaml`) accept every field the
    controller writes, with its value and type, and refuse what we do not write."""

    def test_every_field_we_write_is_stored_as_written(self, cluster: Cluster, kai_api: KaiApi) -> None:
        for obj in kai_objects_we_write("default"):
            proc = strict_dry_run(cluster, obj)
            assert proc.returncode == 0, (obj["kind"], proc.stderr)
            assert json.loads(proc.stdout)["spec"] == obj["spec"], obj["kind"]  # nothing pruned

    def test_a_field_we_do_not_write_or_a_wrong_type_is_refused(
        self, cluster: Cluster, namespace: str, rest: RESTClient, kai_api: KaiApi
    ) -> None:
        queue, pod_group = kai_objects_we_write(namespace)
        refused = {
            # unknown fields: our own name for the quota, kube-batch's name for minMember
            "spec.quota": (with_spec(queue, quota={"gpu": 16}), "unknown field"),
            "spec.minAvailable": (with_spec(pod_group, minAvailable=3), "unknown field"),
            # wrong types: a Kubernetes quantity where KAI wants a number, a string for an int32
            "spec.resources.gpu.quota": (
                with_spec(queue, resources={"gpu": {"quota": "16", "limit": -1, "overQuotaWeight": 1}}),
                "must be of type number",
            ),
            "spec.minMember": (with_spec(pod_group, minMember="3"), "must be of type integer"),
        }
        if kai_api.stand_in:  # KAI has this field; the stand-in types only what we write
            refused["spec.displayName"] = (with_spec(queue, displayName="Team"), "unknown field")
        for field, (obj, why) in refused.items():
            proc = strict_dry_run(cluster, obj)
            assert proc.returncode != 0 and field in proc.stderr and why in proc.stderr, (field, proc.stderr)

        # without strict validation (the controller's own writes) an unknown field is dropped, so a
        # test reading back what the controller wrote sees it missing
        stored = rest.create(KAI_POD_GROUPS, with_spec(pod_group, minAvailable=3))
        assert stored["spec"] == pod_group["spec"]
        # a wrong type is refused whatever the validation
        with pytest.raises(ApiError) as refusal:
            zero = with_spec(pod_group, minMember=0)
            rest.create(KAI_POD_GROUPS, {**zero, "metadata": {**zero["metadata"], "name": "zero"}})
        assert refusal.value.invalid and "spec.minMember" in str(refusal.value)


@pytest.mark.usefixtures("kai_api")
class TestKai:
    """The KAI objects and their linkage, as the API server stores them. No KAI scheduler runs:
    nothing here shows KAI placing a gang (pods stay unplaced), and the CRDs are a stand-in
    whenever the module proxy does not serve KAI's module (`kai_api`, reported in the summary)."""

    def test_kai_queue_tree_follows_the_queues(
        self,
        cluster: Cluster,
        namespace: str,
        make_queue: Maker,
        start_controller: Callable[..., App],
    ) -> None:
        tag = uuid.uuid4().hex[:6]
        root, child = f"root-{tag}", f"team-{tag}"
        leaf = make_queue(
            scheduling={"scheduler": "kai-scheduler"},
            kaiQueue=child,
            parentKaiQueue=root,
            quota={"gpu": {"quota": "16", "limit": "32", "overQuotaWeight": 2}, "memory": {"quota": "512Gi"}},
        )
        start_controller()
        make_job(cluster, namespace, leaf)

        # the parent KAI Queue does not exist yet: the queue and its job wait, nothing is created
        obj = wait_reason(cluster, leaf, "Ready", "ParentQueueNotFound")
        assert root in (condition(obj, "Ready") or {})["message"]
        assert (condition(obj, "KaiQueueReady") or {})["reason"] == "ParentQueueNotFound"
        assert get_or_none(cluster, KAI_QUEUES, child) is None
        job_condition(cluster, namespace, "Admitted", "QueueNotReady")

        # a second TorchrunQueue makes the parent: the tree forms and the job starts
        top = make_queue(scheduling={"scheduler": "kai-scheduler"}, kaiQueue=root)
        wait_reason(cluster, top, "KaiQueueReady", "KaiQueueSynced")
        wait_reason(cluster, leaf, "Ready", "Ready", timeout=45)
        kq = cluster.get(KAI_QUEUES, child)
        assert kq["spec"]["parentQueue"] == root
        assert kq["spec"]["resources"] == {
            "gpu": {"quota": 16, "limit": 32, "overQuotaWeight": 2},
            "cpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": 549755.813888, "limit": -1, "overQuotaWeight": 1},
        }
        owner = kq["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("TorchrunQueue", leaf)
        assert "parentQueue" not in cluster.get(KAI_QUEUES, root)["spec"]
        job_condition(cluster, namespace, "Admitted", "Admitted")
        wait_until(lambda: get_or_none(cluster, "job", "train", "-n", namespace), 30, message="worker Job")

        # quota changes reach the KAI Queue; fields an admin set are kept
        merge_patch(cluster, KAI_QUEUES, child, {"spec": {"priority": 300}})
        merge_patch(
            cluster, "torchrunqueue", leaf, {"spec": {"quota": {"gpu": {"quota": "8", "limit": "32"}}}}
        )
        wait_until(
            lambda: cluster.get(KAI_QUEUES, child)["spec"]["resources"]["gpu"]["quota"] == 8,
            30,
            message="quota 8",
        )
        assert cluster.get(KAI_QUEUES, child)["spec"]["priority"] == 300

        # renaming the KAI Queue moves it: the new one exists, the old one is deleted
        renamed = f"renamed-{tag}"
        merge_patch(cluster, "torchrunqueue", leaf, {"spec": {"kaiQueue": renamed}})
        wait_until(lambda: get_or_none(cluster, KAI_QUEUES, renamed), 30, message="renamed KAI Queue")
        wait_until(
            lambda: get_or_none(cluster, KAI_QUEUES, child) is None, 30, message="old KAI Queue deleted"
        )
        wait_until(
            lambda: cluster.get(KAI_PODGROUPS, "train", "-n", namespace)["spec"]["queue"] == renamed,
            30,
            message="PodGroup follows the queue",
        )

        # deleting the TorchrunQueue deletes its KAI Queue (owner reference, garbage collector)
        cluster.kubectl("delete", "torchrunqueue", leaf, "--wait=true")
        wait_until(
            lambda: get_or_none(cluster, KAI_QUEUES, renamed) is None, 120, 0.5, message="KAI Queue GC"
        )
        assert get_or_none(cluster, KAI_QUEUES, root) is not None

    def test_queue_checks_read_caches_not_the_api(
        self, cluster: Cluster, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        tag = uuid.uuid4().hex[:6]
        sc = f"fast-{tag}"
        cluster.apply(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": sc},
                "provisioner": "kubernetes.io/no-provisioner",
            }
        )
        try:
            make_queue(scheduling={"scheduler": "kai-scheduler"}, kaiQueue=f"root-{tag}")
            leaf = make_queue(
                scheduling={"scheduler": "kai-scheduler"},
                kaiQueue=f"team-{tag}",
                parentKaiQueue=f"root-{tag}",
                storage={"workspace": {"storageClassName": sc}},
            )
            app = start_controller()
            wait_reason(cluster, leaf, "Ready", "Ready", timeout=45)
            wait_reason(cluster, leaf, "KaiQueueReady", "KaiQueueSynced")

            # the StorageClass, the parent KAI Queue and its own KAI Queue all come from caches
            resources = ("storageclasses.storage.k8s.io", "queues.scheduling.run.ai")
            before = {r: reads(app, r) for r in resources}
            force_passes(app, cluster, "torchrunqueue", "torchrunqueue", leaf)
            assert {r: reads(app, r) for r in resources} == before
            assert (condition(cluster.get("torchrunqueue", leaf), "Ready") or {})["status"] == "True"
        finally:
            cluster.kubectl("delete", "storageclass", sc, check=False)

    def test_kai_queue_not_made_by_us_is_left_alone(
        self, cluster: Cluster, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        name = f"shared-{uuid.uuid4().hex[:6]}"
        theirs = {"gpu": {"quota": 1, "limit": 2, "overQuotaWeight": 1}}
        cluster.apply(
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"resources": theirs},
            }
        )
        try:
            queue = make_queue(
                scheduling={"scheduler": "kai-scheduler"}, kaiQueue=name, quota={"gpu": {"quota": "64"}}
            )
            start_controller()
            obj = wait_reason(cluster, queue, "KaiQueueReady", "KaiQueueNotManaged")
            assert (condition(obj, "Ready") or {})["status"] == "True"
            kq = cluster.get(KAI_QUEUES, name)
            assert kq["spec"]["resources"] == theirs and not kq["metadata"].get("ownerReferences")
        finally:
            cluster.kubectl("delete", KAI_QUEUES, name, check=False)

    def test_kai_job_gets_an_owned_pod_group_its_pods_and_job_point_to(
        self,
        cluster: Cluster,
        namespace: str,
        make_queue: Maker,
        start_controller: Callable[..., App],
        priority_class: str,
    ) -> None:
        """Objects and linkage only: the PodGroup (minMember = nodes, KAI queue, priority class,
        owned by the TorchrunJob, gone with it), the pods' schedulerName, pod-group annotation and
        queue label, and the skip-podgrouper annotation on pods and Job. No KAI scheduler runs here
        (its module is not served, nor is an image), so the pods stay unplaced and nothing shows
        that KAI places the gang all at once."""
        kai_queue = f"gang-{uuid.uuid4().hex[:6]}"
        queue = make_queue(
            scheduling={"scheduler": "kai-scheduler", "priorityClassName": priority_class}, kaiQueue=kai_queue
        )
        start_controller()
        make_job(cluster, namespace, queue, numNodes=3)
        pg = wait_until(
            lambda: get_or_none(cluster, KAI_PODGROUPS, "train", "-n", namespace),
            60,
            message="PodGroup",
        )
        tj = cluster.get("torchrunjob", "train", "-n", namespace)
        assert pg["spec"]["minMember"] == 3
        assert pg["spec"]["queue"] == kai_queue and pg["spec"]["priorityClassName"] == priority_class
        assert pg["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]
        assert pg["metadata"]["labels"]["torchrun-job-name"] == "train"

        pods = wait_until(
            lambda: (p := worker_pods(cluster, namespace)) and len(p) == 3 and p, 60, message="3 pods"
        )
        for pod in pods:
            assert pod["spec"]["schedulerName"] == "kai-scheduler"
            assert pod["metadata"]["annotations"]["pod-group-name"] == pg["metadata"]["name"]
            assert pod["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"] == "true"
            assert pod["metadata"]["labels"]["kai.scheduler/queue"] == kai_queue
            assert not pod["spec"].get("nodeName")  # nobody but KAI may place them
        assert (
            cluster.get("job", "train", "-n", namespace)["metadata"]["annotations"][
                "kai.scheduler/skip-podgrouper"
            ]
            == "true"
        )

        cluster.kubectl("delete", "torchrunjob", "train", "-n", namespace, "--wait=true")
        wait_until(
            lambda: get_or_none(cluster, KAI_PODGROUPS, "train", "-n", namespace) is None,
            120,
            0.5,
            message="PodGroup deleted with its job",
        )


# -- Kueue ---------------------------------------------------------------------------------------


def workload_as_kueue_makes_it(cluster: Cluster, ns: str, job: dict[str, Any]) -> str:
    """The Workload Kueue creates for a Job (labelled with the Job's UID and owned by it), made by
    the test: no Kueue runs in `TestKueueContract`."""
    name = f"job-{job['metadata']['name']}-{job['metadata']['uid'][:5]}"
    cluster.apply(
        {
            "apiVersion": kueue_api(cluster),
            "kind": "Workload",
            "metadata": {
                "name": name,
                "labels": {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "queueName": job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
                "podSets": [
                    {"name": "main", "count": job["spec"]["parallelism"], "template": job["spec"]["template"]}
                ],
            },
        },
        ns,
    )
    return name


@pytest.mark.stand_in(KUEUE)  # the test plays Kueue
@pytest.mark.usefixtures("scheduler_apis")
class TestKueueContract:
    """The controller's side of the contract with Kueue, with the test making Kueue's moves itself
    through the API (creating the Workload, injecting a flavor's nodeSelector, unsuspending the
    Job): no Kueue runs here. `TestRealKueue` is the evidence that the real Kueue agrees."""

    def test_admission_is_left_to_kueue_and_suspend_goes_through_the_workload(
        self, cluster: Cluster, namespace: str, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        """The Job is created suspended with the LocalQueue label; once unsuspended by someone
        else it is never re-suspended nor its nodeSelector undone; the TorchrunJob's suspend sets
        Job.spec.suspend and Workload.spec.active=false, resume only sets spec.active=true and
        never unsuspends the Job itself."""
        queue = make_queue(scheduling={"scheduler": "kueue"}, kueueLocalQueue="team-lq")
        app = start_controller()
        make_job(cluster, namespace, queue)
        wait_reason(cluster, queue, "Ready", "Ready")
        job = wait_until(
            lambda: get_or_none(cluster, "job", "train", "-n", namespace), 60, message="worker Job"
        )
        assert job["spec"]["suspend"] is True
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-lq"
        assert worker_pods(cluster, namespace) == []
        workload = workload_as_kueue_makes_it(cluster, namespace, job)

        # the test admits, as Kueue would: it injects the flavor's node selector and unsuspends the Job
        zone = {"topology.kubernetes.io/zone": "zone-1"}
        merge_patch(
            cluster, "job", "train", {"spec": {"template": {"spec": {"nodeSelector": zone}}}}, "-n", namespace
        )
        merge_patch(cluster, "job", "train", {"spec": {"suspend": False}}, "-n", namespace)
        running = job_condition(cluster, namespace, "Running", "AllWorkersRunning")
        assert running["status"]["phase"] == "Running"
        nodes = {p["spec"]["nodeName"] for p in worker_pods(cluster, namespace)}
        assert nodes <= {"gpu-node-1", "gpu-node-3"} and len(nodes) == 2
        assert cluster.get("job", "train", "-n", namespace)["spec"]["suspend"] is False  # never re-suspended

        # the user suspends: the Job is suspended and the Workload deactivated, so Kueue keeps it so
        merge_patch(cluster, "torchrunjob", "train", {"spec": {"suspend": True}}, "-n", namespace)
        job_condition(cluster, namespace, "Suspended", "Suspended")
        wait_until(
            lambda: cluster.get("workload", workload, "-n", namespace)["spec"].get("active") is False,
            30,
            message="Workload deactivated",
        )
        assert cluster.get("job", "train", "-n", namespace)["spec"]["suspend"] is True
        wait_until(lambda: worker_pods(cluster, namespace) == [], 60, message="pods gone")

        # the user resumes: the Workload is active again, and unsuspending is left to Kueue
        merge_patch(cluster, "torchrunjob", "train", {"spec": {"suspend": False}}, "-n", namespace)
        wait_until(
            lambda: cluster.get("workload", workload, "-n", namespace)["spec"].get("active") is True,
            30,
            message="Workload reactivated",
        )
        # every pass the resume and the Workload's update caused has run: none unsuspended the Job
        wait_settled(app, "torchrunjob")
        assert cluster.get("job", "train", "-n", namespace)["spec"]["suspend"] is True
        merge_patch(cluster, "job", "train", {"spec": {"suspend": False}}, "-n", namespace)  # readmitted
        job_condition(cluster, namespace, "Running", "AllWorkersRunning")

    def test_a_suspended_jobs_workload_is_followed_from_a_cache(
        self, cluster: Cluster, namespace: str, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        queue = make_queue(scheduling={"scheduler": "kueue"}, kueueLocalQueue="team-lq")
        app = start_controller()
        make_job(cluster, namespace, queue, suspend=True)
        job = wait_until(
            lambda: get_or_none(cluster, "job", "train", "-n", namespace), 60, message="worker Job"
        )
        assert job["spec"]["suspend"] is True
        # Kueue makes the Workload after the Job: its arrival alone brings the job back to deactivate it
        workload = workload_as_kueue_makes_it(cluster, namespace, job)
        wait_until(
            lambda: cluster.get("workload", workload, "-n", namespace)["spec"].get("active") is False,
            30,
            message="Workload deactivated",
        )
        resource = "workloads.kueue.x-k8s.io"
        before = reads(app, resource)
        force_passes(app, cluster, "torchrunjob", "torchrunjob", "train", "-n", namespace)
        assert reads(app, resource) == before  # looked up on every pass while suspended, in the cache
        assert cluster.get("workload", workload, "-n", namespace)["spec"]["active"] is False


# -- coscheduling and Volcano --------------------------------------------------------------------


@pytest.mark.usefixtures("scheduler_apis")
class TestCoschedulingAndVolcano:
    def test_coscheduling_job_gets_an_owned_pod_group_its_pods_are_labelled_with(
        self, cluster: Cluster, namespace: str, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        """Objects and linkage only: the scheduler-plugins PodGroup (minMember = nodes, owned by the
        TorchrunJob), the pods' `scheduling.x-k8s.io/pod-group` label and scheduler name. No
        scheduler-plugins runs in this module, so the pods stay unplaced; test_gang.py runs it and
        shows the placement."""
        queue = make_queue(scheduling={"scheduler": "coscheduling"})
        start_controller()
        make_job(cluster, namespace, queue, numNodes=3)
        pg = wait_until(
            lambda: get_or_none(cluster, "podgroups.scheduling.x-k8s.io", "train", "-n", namespace),
            60,
            message="PodGroup",
        )
        tj = cluster.get("torchrunjob", "train", "-n", namespace)
        assert pg["spec"]["minMember"] == 3
        assert controller_owner(pg) == ("TorchrunJob", tj["metadata"]["uid"])
        pods = wait_until(lambda: len(p := worker_pods(cluster, namespace)) == 3 and p, 60, message="pods")
        for pod in pods:
            assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "train"
            assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
            assert not pod["spec"].get("nodeName")  # nothing serves that scheduler name here

    def test_an_earlier_jobs_pod_group_is_waited_out_without_polling(
        self, cluster: Cluster, namespace: str, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        crd = "podgroups.scheduling.x-k8s.io"
        queue = make_queue(scheduling={"scheduler": "coscheduling"})
        app = start_controller()
        make_job(cluster, namespace, queue)
        old = wait_until(lambda: get_or_none(cluster, crd, "train", "-n", namespace), 60, message="PodGroup")
        # the earlier job goes, but a finalizer holds its PodGroup as a slow garbage collector would
        hold = {"metadata": {"finalizers": ["example.com/hold"]}}
        merge_patch(cluster, crd, "train", hold, "-n", namespace)
        try:
            cluster.kubectl("delete", "torchrunjob", "train", "-n", namespace, "--wait=true")
            wait_until(
                lambda: (
                    get_or_none(cluster, "job", "train", "-n", namespace) is None
                    and get_or_none(cluster, "service", "train", "-n", namespace) is None
                ),
                60,
                message="the earlier job's Job and Service gone",
            )
            assert get_or_none(cluster, crd, "train", "-n", namespace)["metadata"]["deletionTimestamp"]
            waits = reconciles(app, "torchrunjob", "requeue")
            make_job(cluster, namespace, queue)
            before = reads(app, crd)
            # five passes of the new job found the earlier job's PodGroup and chose to wait (a
            # rate-limited retry each: 5 ms doubling, so ~0.2 s in all, well inside the timeout)
            wait_until(
                lambda: reconciles(app, "torchrunjob", "requeue") >= waits + 5,
                30,
                message="five waiting passes of the new job",
            )
            gated = get_or_none(cluster, "job", "train", "-n", namespace) is None
            polled = reads(app, crd) - before
            # and the user is told why: the status of every waiting pass is written
            admitted = condition(job_condition(cluster, namespace, "Admitted", "NameConflict"), "Admitted")
        finally:
            release = ["--type=merge", "-p", json.dumps({"metadata": {"finalizers": None}})]
            cluster.kubectl("patch", crd, "train", "-n", namespace, *release, check=False)
        assert gated  # no worker Job, so no pod outside its gang
        assert polled == 0  # waited on the cache, not by polling the API
        assert admitted is not None and admitted["status"] == "False"
        assert admitted["message"].startswith(
            f"PodGroup {namespace}/train still belongs to an earlier TorchrunJob"
        )

        tj = cluster.get("torchrunjob", "train", "-n", namespace)
        pg = wait_until(
            lambda: (
                (p := get_or_none(cluster, crd, "train", "-n", namespace))
                and p["metadata"]["uid"] != old["metadata"]["uid"]
                and p
            ),
            30,
            message="the new job's PodGroup",
        )
        assert pg["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]
        # the job goes on: its pods are made (placing them is test_gang.py's, with scheduler-plugins)
        wait_until(lambda: len(worker_pods(cluster, namespace)) == 2, 60, message="the worker pods")

    def test_a_foreign_pod_group_is_never_used_and_the_job_says_so(
        self, cluster: Cluster, namespace: str, make_queue: Maker, start_controller: Callable[..., App]
    ) -> None:
        """A PodGroup named like the job that someone else made (no owner reference) is neither
        used, changed nor deleted: the job waits with `Admitted=False NameConflict` naming it, makes
        no worker Job, and starts by itself once the name is free."""
        crd = "podgroups.scheduling.x-k8s.io"
        foreign = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": namespace, "labels": {"team": "other"}},
            "spec": {"minMember": 7},
        }
        cluster.kubectl("apply", "-f", "-", input=json.dumps(foreign))
        queue = make_queue(scheduling={"scheduler": "coscheduling"})
        start_controller()
        make_job(cluster, namespace, queue)
        tj = job_condition(cluster, namespace, "Admitted", "NameConflict")
        message = condition(tj, "Admitted")["message"]
        assert message.startswith(f"PodGroup {namespace}/train already exists and is not controlled by")
        assert tj["status"]["phase"] == "Pending"
        assert get_or_none(cluster, "job", "train", "-n", namespace) is None
        pg = cluster.get(crd, "train", "-n", namespace)
        assert pg["spec"]["minMember"] == 7 and not pg["metadata"].get("ownerReferences")  # untouched
        cluster.kubectl("delete", crd, "train", "-n", namespace)
        job_condition(cluster, namespace, "Admitted", "Admitted")
        mine = wait_until(
            lambda: get_or_none(cluster, crd, "train", "-n", namespace), 60, message="its PodGroup"
        )
        assert controller_owner(mine) == ("TorchrunJob", tj["metadata"]["uid"])

    def test_volcano_job_gets_an_owned_pod_group_its_pods_are_annotated_with(
        self,
        cluster: Cluster,
        namespace: str,
        make_queue: Maker,
        start_controller: Callable[..., App],
        priority_class: str,
    ) -> None:
        """Objects and linkage only: the Volcano PodGroup (minMember = nodes, queue `default`,
        priority class, owned by the TorchrunJob), the pods' `schedulerName: volcano` and
        `scheduling.k8s.io/group-name` annotation. No Volcano scheduler runs here, so the pods
        stay unplaced and nothing shows that Volcano places the gang."""
        queue = make_queue(scheduling={"scheduler": "volcano", "priorityClassName": priority_class})
        start_controller()
        make_job(cluster, namespace, queue)
        pg = wait_until(
            lambda: get_or_none(cluster, "podgroups.scheduling.volcano.sh", "train", "-n", namespace),
            60,
            message="PodGroup",
        )
        tj = cluster.get("torchrunjob", "train", "-n", namespace)
        assert pg["spec"]["minMember"] == 2 and pg["spec"]["queue"] == "default"
        assert pg["spec"]["priorityClassName"] == priority_class
        assert controller_owner(pg) == ("TorchrunJob", tj["metadata"]["uid"])
        pods = wait_until(
            lambda: (p := worker_pods(cluster, namespace)) and len(p) == 2 and p, 60, message="pods"
        )
        for pod in pods:
            assert pod["spec"]["schedulerName"] == "volcano"
            assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == pg["metadata"]["name"]
            assert not pod["spec"].get("nodeName")  # nothing serves schedulerName volcano here


# -- the real Kueue ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def kueue_version() -> str:
    """The pinned Kueue, or the one hack/bench/kueue_compat.py asks for (as the scripts read it)."""
    return os.environ.get("TORCHRUN_KUEUE_VERSION") or pins()["KUEUE_VERSION"]


def kueue_binary() -> Path:
    return cache_dir() / "bin" / f"kueue-{kueue_version()}" / "kueue"


def kueue_api(cluster: Cluster) -> str:
    """The Kueue API version the test writes in: the newest served (what Kueue stores)."""
    served = workloads_served(lambda gv: api_served(cluster, gv))
    assert served is not None, "no Kueue API is served"
    return served.api_version


@dataclass(frozen=True)
class RealKueue:
    """The Kueue controller manager running for one test: its ResourceFlavor, and a ClusterQueue
    of 4 x 8 GPUs on it."""

    flavor: str
    cluster_queue: str


@pytest.fixture
def real_kueue(cluster: Cluster, tmp_path: Path) -> Iterator[RealKueue]:
    """The Kueue controller manager built from its module, with a ClusterQueue of 4 x 8 GPUs; a
    test failing meanwhile shows the tail of Kueue's log."""
    binary = kueue_binary()
    if not binary.exists():
        pytest.skip(f"the real Kueue is not built: run hack/testbed/build-kueue.sh (expects {binary})")
    certs = tmp_path / "certs"
    certs.mkdir()
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    keys = ["-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt")]
    subprocess.run([*openssl, "-subj", "/CN=kueue-webhook", *keys], check=True, capture_output=True)
    webhook_port, health_port = free_port(), free_port()
    # a namespace of its own each time: the last one may still be terminating, its Secret gone
    system = f"kueue-system-{uuid.uuid4().hex[:6]}"
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "namespace": system,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        # with it off, Kueue insists on metrics certificates under /etc/kueue; with it on, it keeps its
        # CA in a Secret, writes certDir, and waits to fill in its webhooks (`hooks_for_kueue_to_fill`)
        "internalCertManagement": {"enable": True},
        "integrations": {"frameworks": ["batch/job"]},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    hooks_for_kueue_to_fill(cluster, webhook_port)
    cluster.kubectl("create", "namespace", system)
    # the Secret Kueue's cert rotator fills (Kueue's manifests ship it empty)
    cluster.kubectl("create", "secret", "generic", "kueue-webhook-server-cert", "-n", system)
    log = (tmp_path / "kueue.log").open("w")
    # no aggregated API server on a fixed port; elastic jobs as workload slices (beta and on by
    # default since 0.18; said anyway, for the older Kueue hack/bench/kueue_compat.py runs)
    gates = "--feature-gates=VisibilityOnDemand=false,ElasticJobsViaWorkloadSlices=true"
    args = [str(binary), "--config", str(tmp_path / "config.yaml"), gates, "--zap-log-level=2"]
    proc = subprocess.Popen(args, env=cluster.env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        with shown_on_failure(tmp_path / "kueue.log"):
            kueue_ready(proc, health_port)
            flavor = f"flavor-{uuid.uuid4().hex[:6]}"
            resource_flavor = {
                "apiVersion": kueue_api(cluster),
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
            }
            cluster.apply(resource_flavor)
            yield RealKueue(flavor, cluster_queue(cluster, flavor, gpus=32))
            assert proc.poll() is None, f"Kueue exited during the test (exit code {proc.returncode})"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        release_kueue_objects(cluster)
        no_hooks_for_kueue(cluster)
        cluster.kubectl("delete", "namespace", system, "--wait=false", check=False)


def kueue_state(cluster: Cluster, ns: str, job: str) -> str:
    """What a Kueue test's wait was waiting on, a line each, for its failure's message: the
    worker Job (suspended, parallelism, active/ready), its pods (phase, node, gates), every
    Workload (pod count, conditions) and the TorchrunJob's phase and conditions."""
    lines = []
    worker = get_or_none(cluster, "job", job, "-n", ns)
    if worker is not None:
        spec, status = worker["spec"], worker.get("status") or {}
        said = {k: status.get(k) for k in ("active", "ready", "failed", "succeeded")}
        lines.append(f"Job {job}: suspend={spec.get('suspend')} parallelism={spec.get('parallelism')} {said}")
    for pod in worker_pods(cluster, ns, job):
        gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
        node, phase = pod["spec"].get("nodeName"), (pod.get("status") or {}).get("phase")
        lines.append(f"pod {pod['metadata']['name']}: {phase} on {node} gates={gates}")
    for w in cluster.get("workloads", "-n", ns)["items"]:
        said = [
            f"{c['type']}={c['status']}({c.get('reason')})"
            for c in (w.get("status") or {}).get("conditions", [])
        ]
        lines.append(f"Workload {w['metadata']['name']}: count={w['spec']['podSets'][0]['count']} {said}")
    ours = get_or_none(cluster, "torchrunjob", job, "-n", ns)
    if ours is not None:
        status = ours.get("status") or {}
        said = [
            f"{c['type']}={c['status']}({c.get('reason')}: {c.get('message')})"
            for c in status.get("conditions", [])
        ]
        lines.append(f"TorchrunJob {job}: {status.get('phase')} {said}")
    return "\n".join(lines)


@contextmanager
def explained_by_kueue_state(cluster: Cluster, ns: str, job: str) -> Iterator[None]:
    """A wait inside that fails says, after its own message, `kueue_state` at that moment."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{kueue_state(cluster, ns, job)}") from exc


def kueue_ready(proc: subprocess.Popen[bytes], health_port: int, timeout: float = 120.0) -> None:
    """Return once Kueue's /readyz answers 200 (its certificates are made and put into its hooks,
    its webhook server listens): a test's own waits then start with Kueue up, not starting. Fails,
    saying so, as soon as Kueue exits, or if it is not ready within `timeout` seconds."""

    def ready() -> bool:
        if proc.poll() is not None:  # not an assert: wait_until would take that for "not yet"
            pytest.fail(f"Kueue exited while starting (exit code {proc.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:  # not listening yet, or 500 while its certificates are not ready
            return False

    wait_until(ready, timeout, 0.5, message="Kueue's /readyz")


KUEUE_CONVERTED = ("localqueues", "clusterqueues", "workloads", "cohorts", "multikueueclusters")
KUEUE_HOOKS = ("validating", "mutating")


def hooks_for_kueue_to_fill(cluster: Cluster, port: int) -> None:
    """What Kueue's start waits to put its CA into (since 0.15 it starts nothing before): its two
    webhook configurations, here with no webhook in them (the test bed registers none, as before),
    and a conversion webhook on the CRDs it converts. The API server does call that webhook, and
    every call fails (Kueue's log is full of failed TLS handshakes: its certificate names its
    Service's DNS name, not this address); which request needs a conversion was not found. What
    the tests and the controller read is the version Kueue stores (`v1beta2`), which needs none."""
    for kind in KUEUE_HOOKS:
        cluster.apply(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": f"{kind.capitalize()}WebhookConfiguration",
                "metadata": {"name": f"kueue-{kind}-webhook-configuration"},
                "webhooks": [],
            }
        )
    conversion = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://127.0.0.1:{port}/convert"},
        },
    }
    for plural in KUEUE_CONVERTED:
        patch = json.dumps({"spec": {"conversion": conversion}})
        cluster.kubectl("patch", "crd", f"{plural}.kueue.x-k8s.io", "--type=merge", "-p", patch)


def no_hooks_for_kueue(cluster: Cluster) -> None:
    """Undo `hooks_for_kueue_to_fill`: the CRDs convert as they were installed (`None`)."""
    for kind in KUEUE_HOOKS:
        cluster.kubectl(
            "delete", f"{kind}webhookconfiguration", f"kueue-{kind}-webhook-configuration", check=False
        )
    none = json.dumps({"spec": {"conversion": {"strategy": "None", "webhook": None}}})
    for plural in KUEUE_CONVERTED:
        cluster.kubectl("patch", "crd", f"{plural}.kueue.x-k8s.io", "--type=merge", "-p", none, check=False)


def cluster_queue(cluster: Cluster, flavor: str, gpus: int, name: str | None = None) -> str:
    """A ClusterQueue of a fresh name for every namespace (or `name`'s quota changed): `gpus` GPUs
    in `flavor`, and the CPUs and memory of four test-bed nodes (so GPUs are what runs out)."""
    name = name or f"cq-{uuid.uuid4().hex[:6]}"
    quotas = {"nvidia.com/gpu": str(gpus), "cpu": "400", "memory": "4Ti"}
    cluster.apply(
        {
            "apiVersion": kueue_api(cluster),
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": list(quotas),
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [{"name": k, "nominalQuota": v} for k, v in quotas.items()],
                            }
                        ],
                    }
                ],
            },
        }
    )
    return name


ZONE = "topology.kubernetes.io/zone"  # the test bed's kwok nodes: gpu-node-<i> in zone-<i % 2>
HOSTNAME = "kubernetes.io/hostname"


def topology_cluster_queue(cluster: Cluster, gpus: int) -> str:
    """A ClusterQueue of `gpus` GPUs on a flavor of its own for topology-aware scheduling: a Kueue
    Topology of two levels (zone, then node) and a flavor on the kwok nodes naming it."""
    api, suffix = kueue_api(cluster), uuid.uuid4().hex[:6]
    levels = [{"nodeLabel": ZONE}, {"nodeLabel": HOSTNAME}]
    cluster.apply(
        {
            "apiVersion": api,
            "kind": "Topology",
            "metadata": {"name": f"zones-{suffix}"},
            "spec": {"levels": levels},
        }
    )
    flavor = f"tas-{suffix}"
    spec = {"nodeLabels": {"type": "kwok"}, "topologyName": f"zones-{suffix}"}
    cluster.apply({"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": spec})
    return cluster_queue(cluster, flavor, gpus)


def local_queue(cluster: Cluster, ns: str, cq: str, name: str = "team-lq") -> str:
    """A LocalQueue in `ns` that submits to ClusterQueue `cq`."""
    body = {"apiVersion": kueue_api(cluster), "kind": "LocalQueue", "metadata": {"name": name}}
    cluster.apply({**body, "spec": {"clusterQueue": cq}}, ns)
    return name


def release_kueue_objects(cluster: Cluster) -> None:
    """Delete what Kueue made or guarded: with Kueue stopped, its finalizers would block the
    namespaces and the CRDs from going, so they are taken off first."""
    for kind in ("workloads", "localqueues", "clusterqueues", "resourceflavors", "topologies.kueue.x-k8s.io"):
        for item in cluster.get(kind, "-A")["items"]:
            meta = item["metadata"]
            ns = ["-n", meta["namespace"]] if meta.get("namespace") else []
            cluster.kubectl(
                "patch",
                kind,
                meta["name"],
                *ns,
                "--type=merge",
                "-p",
                '{"metadata":{"finalizers":null}}',
                check=False,
            )
            cluster.kubectl("delete", kind, meta["name"], *ns, "--wait=false", check=False)


def kueue_released(cluster: Cluster, ns: str) -> bool:
    """The job's Workload is deactivated, evicted and holds no quota (Kueue's own conditions)."""
    (workload,) = cluster.get("workloads", "-n", ns)["items"]
    evicted = condition(workload, "Evicted") or {}
    reserved = condition(workload, "QuotaReserved") or {}
    return (
        workload["spec"].get("active") is False
        and evicted.get("status") == "True"
        and reserved.get("status") != "True"
        and not (workload.get("status") or {}).get("admission")
    )


def workload_of(cluster: Cluster, ns: str, job: str) -> dict[str, Any] | None:
    """The Workload Kueue made for worker Job `job` (by Kueue's job-uid label); None without one."""
    worker = get_or_none(cluster, "job", job, "-n", ns)
    if worker is None:
        return None
    selector = f"kueue.x-k8s.io/job-uid={worker['metadata']['uid']}"
    items = cluster.get("workloads", "-n", ns, "-l", selector)["items"]
    return items[0] if items else None


@pytest.mark.usefixtures("scheduler_apis")
class TestRealKueue:
    def test_real_kueue_admits_a_two_node_job_and_honours_suspend(
        self,
        cluster: Cluster,
        namespace: str,
        make_queue: Maker,
        start_controller: Callable[..., App],
        real_kueue: RealKueue,
    ) -> None:
        lq = local_queue(cluster, namespace, real_kueue.cluster_queue)
        queue = make_queue(scheduling={"scheduler": "kueue"}, kueueLocalQueue=lq)
        start_controller()
        make_job(cluster, namespace, queue)

        def admitted() -> dict[str, Any] | None:
            items = cluster.get("workloads", "-n", namespace)["items"]
            return items[0] if items and (items[0].get("status") or {}).get("admission") else None

        workload = wait_until(admitted, 90, 0.5, message="Kueue admits the Workload")
        assert workload["status"]["admission"]["clusterQueue"] == real_kueue.cluster_queue
        assert workload["spec"]["podSets"][0]["count"] == 2
        running = job_condition(cluster, namespace, "Running", "AllWorkersRunning")
        assert running["status"]["workers"]["ready"] == 2

        # suspend with Kueue running: the Workload is deactivated, Kueue evicts and keeps it suspended
        merge_patch(cluster, "torchrunjob", "train", {"spec": {"suspend": True}}, "-n", namespace)
        job_condition(cluster, namespace, "Suspended", "Suspended")
        wait_until(lambda: worker_pods(cluster, namespace) == [], 60, message="pods gone")
        # Kueue has done its part: the Workload is evicted and its quota released; had the two
        # fought, Kueue would have unsuspended the Job while the Workload was still admitted
        wait_until(lambda: kueue_released(cluster, namespace), 60, message="Kueue evicts the Workload")
        assert cluster.get("job", "train", "-n", namespace)["spec"]["suspend"] is True

        # resume: Kueue readmits and unsuspends; the job runs again
        merge_patch(cluster, "torchrunjob", "train", {"spec": {"suspend": False}}, "-n", namespace)
        job_condition(cluster, namespace, "Running", "AllWorkersRunning")

    def test_real_kueue_holds_a_job_while_its_cluster_queue_is_full_and_admits_it_when_room_frees(
        self,
        cluster: Cluster,
        namespace: str,
        make_queue: Maker,
        start_controller: Callable[..., App],
        real_kueue: RealKueue,
    ) -> None:
        """A ClusterQueue with the GPUs of one 2-node job (16): the first job is admitted and runs;
        the second is held — its Job suspended, no pod, its Workload `QuotaReserved=False Pending`
        naming the GPUs it lacks, quoted by `Running=False WaitingForAdmission` — for as long as the
        first holds the quota (sampled, not assumed); the first job deleted, Kueue admits the
        second into the freed quota and it runs."""
        cq = cluster_queue(cluster, real_kueue.flavor, gpus=16)
        queue = make_queue(
            scheduling={"scheduler": "kueue"}, kueueLocalQueue=local_queue(cluster, namespace, cq)
        )
        start_controller()
        make_job(cluster, namespace, queue, "first")
        job_condition(cluster, namespace, "Running", "AllWorkersRunning", name="first")
        first_workload = (workload_of(cluster, namespace, "first") or {})["metadata"]["name"]
        make_job(cluster, namespace, queue, "second")

        def held() -> dict[str, Any] | None:
            """The second job as Kueue holds it: its Workload pending, its Job suspended, no pod."""
            workload = workload_of(cluster, namespace, "second")
            reserved = condition(workload or {}, "QuotaReserved") or {}
            job = cluster.get("job", "second", "-n", namespace)
            waiting = (
                workload is not None
                and (reserved.get("status"), reserved.get("reason")) == ("False", "Pending")
                and not (workload.get("status") or {}).get("admission")
                and job["spec"]["suspend"] is True
                and worker_pods(cluster, namespace, "second") == []
            )
            return workload if waiting else None

        workload = wait_until(held, 60, 0.5, message="Kueue holds the second job")
        why = (condition(workload, "QuotaReserved") or {})["message"]
        assert f"insufficient unused quota for nvidia.com/gpu in flavor {real_kueue.flavor}" in why, why

        def quoted() -> dict[str, Any] | None:
            """Running=False WaitingForAdmission quoting the Workload (a message-only change of the
            condition may wait the controller's COUNTS_BATCH before it is written)."""
            tj = cluster.get("torchrunjob", "second", "-n", namespace)
            running = condition(tj, "Running") or {}
            message = running.get("message", "")
            said = running.get("reason") == "WaitingForAdmission" and "insufficient unused quota" in message
            return running if said else None

        wait_until(quoted, 30, 0.5, message="the job quotes Kueue")
        # it stays held while the first runs: every sample, up to the moment the first is deleted
        for _ in range(6):
            assert held() is not None, workload_of(cluster, namespace, "second")
            tj = cluster.get("torchrunjob", "second", "-n", namespace)
            # the TorchrunJob says why, in Kueue's words from the Workload (starting.py)
            assert tj["status"]["phase"] == "Pending" and tj["status"]["workers"]["ready"] == 0
            running = condition(tj, "Running") or {}
            assert (running.get("status"), running.get("reason")) == ("False", "WaitingForAdmission"), running
            assert "insufficient unused quota for nvidia.com/gpu" in running.get("message", ""), running
            first = condition(cluster.get("torchrunjob", "first", "-n", namespace), "Running") or {}
            assert first.get("reason") == "AllWorkersRunning", first
            time.sleep(0.5)

        # the first job goes: its Workload with its Job, and Kueue admits the second into its quota
        cluster.kubectl("delete", "torchrunjob", "first", "-n", namespace, "--wait=true")

        def admitted() -> dict[str, Any] | None:
            w = workload_of(cluster, namespace, "second")
            return w if w and (w.get("status") or {}).get("admission") else None

        workload = wait_until(admitted, 90, 0.5, message="Kueue admits the second job")
        assert workload["status"]["admission"]["clusterQueue"] == cq
        assert get_or_none(cluster, "workload", first_workload, "-n", namespace) is None
        running = job_condition(cluster, namespace, "Running", "AllWorkersRunning", name="second")
        assert running["status"]["workers"]["ready"] == 2
        assert cluster.get("job", "second", "-n", namespace)["spec"]["suspend"] is False

    def test_real_kueue_keeps_a_jobs_workers_in_one_zone_when_the_queue_requires_it(
        self,
        cluster: Cluster,
        namespace: str,
        make_queue: Maker,
        start_controller: Callable[..., App],
        real_kueue: RealKueue,
    ) -> None:
        """Kueue's topology-aware scheduling, asked for by the queue (`kueueTopology.required`):
        the test bed's 4 nodes are two zones of two. A 3-node job fits in no zone, so Kueue holds
        it although its quota and the free nodes would take it, and the job quotes Kueue; a 2-node
        job is admitted into one zone, and Kueue ungates each worker onto a node of that zone."""
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in cluster.get("nodes")["items"]}
        zones = {labels[ZONE] for labels in nodes.values() if labels.get("type") == "kwok"}
        assert len(nodes) == 4 and len(zones) == 2, nodes
        cq = topology_cluster_queue(cluster, gpus=32)
        queue = make_queue(
            scheduling={"scheduler": "kueue"},
            kueueLocalQueue=local_queue(cluster, namespace, cq),
            kueueTopology={"required": ZONE},
        )
        start_controller()
        make_job(cluster, namespace, queue, "three", numNodes=3)

        def held_for_topology() -> dict[str, Any] | None:
            tj = cluster.get("torchrunjob", "three", "-n", namespace)
            running = condition(tj, "Running") or {}
            held = running.get("reason") == "WaitingForAdmission" and "Kueue workload" in running.get(
                "message", ""
            )
            return running if held and worker_pods(cluster, namespace, "three") == [] else None

        running = wait_until(held_for_topology, 60, 0.5, message="Kueue holds the 3-node job")
        workload = workload_of(cluster, namespace, "three") or {}
        assert workload["spec"]["podSets"][0]["topologyRequest"]["required"] == ZONE, workload["spec"]
        reserved = condition(workload, "QuotaReserved") or {}
        assert reserved.get("status") == "False" and "insufficient unused quota" not in reserved["message"]
        assert reserved["message"] in running["message"], (reserved, running)
        cluster.kubectl("delete", "torchrunjob", "three", "-n", namespace, "--wait=true")

        make_job(cluster, namespace, queue, "two")
        job_condition(cluster, namespace, "Running", "AllWorkersRunning", name="two")
        pods = worker_pods(cluster, namespace, "two")
        assert len(pods) == 2
        placed = {nodes[p["spec"]["nodeName"]][ZONE] for p in pods}
        assert len(placed) == 1, [(p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods]
        for pod in pods:  # Kueue's gate is gone and its node selector names the pod's node
            assert not pod["spec"].get("schedulingGates"), pod["spec"]
            assert pod["spec"]["nodeSelector"].get(HOSTNAME) == pod["spec"]["nodeName"], pod["spec"]

    def test_real_kueue_grows_an_elastic_job_through_admitted_slices_and_never_past_its_quota(
        self,
        cluster: Cluster,
        namespace: str,
        make_queue: Maker,
        start_controller: Callable[..., App],
        real_kueue: RealKueue,
    ) -> None:
        """`kueueWorkloadSlices`: an elastic 1:3 job of 8-GPU nodes on a ClusterQueue of 16 GPUs,
        with all 4 nodes free. The autoscaler grows it a node a pass: 1→2 is a new workload slice
        Kueue admits, and the new pod is ungated and runs in the same worker Job; 2→3 needs 24
        GPUs, so Kueue holds that slice: the third pod stays gated and unbound while nodes have
        room, and the job, still Running (its two ranks go on), says so in Kueue's words. Once the
        quota is raised to 24, Kueue admits that slice and the job runs at 3."""
        cq = cluster_queue(cluster, real_kueue.flavor, gpus=16)
        queue = make_queue(
            scheduling={"scheduler": "kueue"},
            kueueLocalQueue=local_queue(cluster, namespace, cq),
            kueueWorkloadSlices=True,
        )
        start_controller("--autoscaler-period", "1", "--max-load-desired", "1")
        elastic = {"minNodes": 1, "maxNodes": 3}
        make_job(
            cluster, namespace, queue, "grow", numNodes=1, elastic=elastic, distributed={"maxRestarts": 3}
        )
        created = wait_until(lambda: get_or_none(cluster, "job", "grow", "-n", namespace), 60, message="Job")
        first_uid = created["metadata"]["uid"]

        def bound(n: int) -> list[dict[str, Any]] | None:
            pods = [p for p in worker_pods(cluster, namespace, "grow") if p["spec"].get("nodeName")]
            return pods if len(pods) == n else None

        with explained_by_kueue_state(cluster, namespace, "grow"):
            wait_until(
                lambda: bound(2), 120, 0.5, message="the job grows to 2 nodes through an admitted slice"
            )
        worker = cluster.get("job", "grow", "-n", namespace)
        assert worker["metadata"]["uid"] == first_uid and worker["spec"]["parallelism"] >= 2

        def held() -> dict[str, Any] | None:
            """The third rank's pod exists, gated and unbound, and the job quotes Kueue."""
            gated = [
                p
                for p in worker_pods(cluster, namespace, "grow")
                if not p["spec"].get("nodeName")
                and {"name": "kueue.x-k8s.io/elastic-job"} in (p["spec"].get("schedulingGates") or [])
            ]
            running = condition(cluster.get("torchrunjob", "grow", "-n", namespace), "Running") or {}
            said = (running.get("status"), running.get("reason")) == ("True", "GrowthWaitingForAdmission")
            return running if gated and said and "Kueue workload" in running.get("message", "") else None

        with explained_by_kueue_state(cluster, namespace, "grow"):
            running = wait_until(held, 90, 0.5, message="Kueue holds the growth to 3 nodes")
        assert "insufficient" in running["message"].lower(), running
        # the slices not Finished (the 1-node one is: the 2-node one replaced it): the 2-node one
        # admitted, the 3-node one pending for quota — and the TorchrunJob quotes that one
        live = {}
        for w in cluster.get("workloads", "-n", namespace)["items"]:
            if (condition(w, "Finished") or {}).get("status") != "True":
                live[w["spec"]["podSets"][0]["count"]] = w
        assert sorted(live) == [2, 3], {n: w["metadata"]["name"] for n, w in live.items()}
        assert live[2]["status"].get("admission") and not live[3].get("status", {}).get("admission")
        assert live[3]["metadata"]["name"] in running["message"], running
        for _ in range(6):  # held while 2 nodes stay free: the quota, not the room, bounds it
            assert held() is not None
            assert bound(2) is not None, "a third pod was bound past the ClusterQueue's quota"
            time.sleep(0.5)
        assert cluster.get("torchrunjob", "grow", "-n", namespace)["status"]["phase"] == "Running"

        # the platform raises the quota to 24 GPUs: Kueue admits the held slice, the third pod is
        # ungated and runs, in the same worker Job, and the job is whole at 3 nodes
        cluster_queue(cluster, real_kueue.flavor, gpus=24, name=cq)
        with explained_by_kueue_state(cluster, namespace, "grow"):
            wait_until(
                lambda: bound(3), 90, 0.5, message="Kueue admits the growth to 3 once the quota allows"
            )
        whole = job_condition(cluster, namespace, "Running", "AllWorkersRunning", name="grow")
        assert whole["status"]["workers"]["ready"] == 3
        assert cluster.get("job", "grow", "-n", namespace)["metadata"]["uid"] == first_uid
