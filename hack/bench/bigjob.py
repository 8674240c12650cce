"""W2 one big job: a 256-node job on 256 kwok nodes of 8 GPUs, each pod taking a whole node.

Steps, each timed from the bench's action to the state it waits for (a watch on the namespace's
pods, `Pods`), and then given 5 s without a write in the namespace before the next, so each
step's writes are its own:
1. `start`: the job created → all its pods Running;
2. `pod retry`: one worker pod (not rank 0) fails with exit code 137 (kwok's pod-fail stage,
   the pod annotated `kwok.torchrun.ai/outcome=fail`) → that pod replaced, all pods Running again.
   training-operator (`restartPolicy: ExitCode`; 137 is retryable, ≥ 128) deletes the failed pod
   and creates it again; ours (`failurePolicy.retriableExitCodes: [137]`) leaves it to the Job's
   podFailurePolicy (`Ignore`), and kube-controller-manager's Job controller recreates the index;
3. ours only, `whole-job restart`: another worker pod fails with exit code 1 (ours: not
   permanent, `failurePolicy.maxRestarts: 1`) → every pod replaced by the next attempt's and all
   Running. training-operator v1.9.3 has no whole-job restart: a pod failure either recreates that
   pod (OnFailure, Always, ExitCode with a retryable code) or fails the job;
   ours in place (`restartMode: InPlace`), `whole-job restart in place`: one worker's supervisor
   says its torchrun exited 1 → every pod's supervisor told the next generation and running it
   (`inplace_link.Links.settled`: the acknowledgement, from a stand-in — kwok runs no process);
4. `lost node`: the node of one Running worker pod (not rank 0) deleted → the pod garbage
   collector deletes its pod (kube-controller-manager's 40 s quarantine of a missing node) → a
   replacement Running on the spare node (the control plane has one node more than the job); in
   place, also every rank told the next generation and running it. The node is created again
   after the step (the next run's spare);
5. `delete`: the job deleted (background propagation) → every pod of the namespace gone.
In place, the steps also wait (untimed, before the writes are counted) until every rank's
supervisor runs the status's generation, so a step's writes include the restart it caused; the
pods deleted in each step are counted.
Per step: seconds; the controller's own writes and every write in the namespace (audit log, the
test bed's node agent left out); the controller's CPU seconds and kube-controller-manager's.
Per run: the controller's peak RSS.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from auditlog import Window, by_agent
from burst import IMAGE, bench_queue
from common import (
    KCM_DEFAULT,
    KCM_PRODUCTION,
    REPO,
    bench_client,
    control_plane,
    cpu_seconds,
    free_port,
    install_crds,
    kcm_pid,
    kubectl,
    restart_kube_controller_manager,
    rss_kib,
    table,
    torchrunjob,
)
from controllers import TORCHRUN_USER_AGENT, prepare_training_operator, pytorchjob, stop
from inplace_link import STAND_IN, Links
from workload import (
    OURS,
    TRAINING_OPERATOR,
    Cluster,
    Subject,
    start,
    writes_of,
)

from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.rest import RESTClient
from controller.rest.resources import NAMESPACES, NODES, PODS

GPUS = 8
QUEUE = "big"
JOB = "big"
RETRIABLE_EXIT = 137  # retryable for training-operator (≥ 128), in our job's retriableExitCodes
RESTART_EXIT = 1  # ours: neither permanent nor retriable, so the attempt fails and the job restarts


def big_queue() -> dict[str, Any]:
    """A TorchrunQueue of whole 8-GPU nodes (the nodes' CPUs and memory not asked)."""
    queue = bench_queue()
    queue["metadata"]["name"] = QUEUE
    queue["spec"]["nodeResources"] = {"gpus": GPUS}
    return queue


OURS_IN_PLACE = Subject("torchrun-controller in place", TORCHRUN_USER_AGENT, TORCHRUNJOBS)
SUBJECTS = (TRAINING_OPERATOR, OURS, OURS_IN_PLACE)
SLUGS = {TRAINING_OPERATOR: "training", OURS: "torchrun", OURS_IN_PLACE: "inplace"}


def big_torchrunjob(nodes: int, in_place: bool = False) -> dict[str, Any]:
    failure_policy: dict[str, Any] = {"maxRestarts": 1, "retriableExitCodes": [RETRIABLE_EXIT]}
    if in_place:
        failure_policy["restartMode"] = "InPlace"
    return torchrunjob(JOB, QUEUE, nodes, failurePolicy=failure_policy)


def big_pytorchjob(nodes: int) -> dict[str, Any]:
    """1 master + `nodes - 1` workers, each pod asking for a whole node's GPUs."""
    job = pytorchjob(JOB)
    for name, replicas in (("Master", 1), ("Worker", nodes - 1)):
        spec = job["spec"]["pytorchReplicaSpecs"][name]
        spec.update(replicas=replicas, restartPolicy="ExitCode")
        container = spec["template"]["spec"]["containers"][0]
        assert container["image"] == IMAGE
        container["resources"] = {"limits": {"nvidia.com/gpu": str(GPUS)}}
    return job


MAKE: dict[Subject, Callable[[int], dict[str, Any]]] = {
    OURS: big_torchrunjob,
    OURS_IN_PLACE: lambda nodes: big_torchrunjob(nodes, in_place=True),
    TRAINING_OPERATOR: big_pytorchjob,
}


def _rank(pod: dict[str, Any]) -> str:
    """A pod's rank: its Job completion index (ours), its replica type and index (training-operator)."""
    labels = pod["metadata"].get("labels") or {}
    if "batch.kubernetes.io/job-completion-index" in labels:
        return str(labels["batch.kubernetes.io/job-completion-index"])
    kind = labels.get("training.kubeflow.org/replica-type")
    return f"{kind}-{labels.get('training.kubeflow.org/replica-index')}"


class Pods:
    """Every pod of one namespace as a watch last showed it, by UID; a daemon thread."""

    def __init__(self, rest: RESTClient, ns: str) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self._deleted: set[str] = set()  # UIDs deleted or being deleted
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._rest, self._ns = rest, ns
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(30)

    def _run(self) -> None:
        try:
            rv = self._rest.list(PODS, self._ns, limit=1)["metadata"]["resourceVersion"]
            self._ready.set()
            while not self._stop.is_set():
                for ev in self._rest.watch(PODS, self._ns, resource_version=rv, timeout_seconds=600):
                    meta = ev.object.get("metadata") or {}
                    rv = meta.get("resourceVersion", rv)
                    if ev.type not in ("ADDED", "MODIFIED", "DELETED"):
                        continue
                    with self._lock:
                        if ev.type == "DELETED" or meta.get("deletionTimestamp"):
                            self._deleted.add(meta["uid"])
                        if ev.type == "DELETED":
                            self.pods.pop(meta["uid"], None)
                        else:
                            self.pods[meta["uid"]] = ev.object
        except Exception:  # the control plane goes away at the end of the run
            if not self._stop.is_set():
                raise

    def running(self, exclude: frozenset[str] = frozenset()) -> dict[str, dict[str, Any]]:
        """The Running pods not being deleted whose UIDs are not in `exclude`."""
        with self._lock:
            return {
                uid: p
                for uid, p in self.pods.items()
                if uid not in exclude
                and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") == "Running"
            }

    def deleted(self) -> frozenset[str]:
        """The UIDs of the pods seen deleted or being deleted."""
        with self._lock:
            return frozenset(self._deleted)

    def count(self) -> int:
        with self._lock:
            return len(self.pods)

    def stop(self) -> None:
        self._stop.set()


def _wait(done: Callable[[], bool], what: str, timeout: float = 1800) -> float:
    """When (perf_counter) `done()` first held, polled every 0.1 s; raises after `timeout`."""
    deadline = time.perf_counter() + timeout
    while not done():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"W2: {what} not reached in {timeout:.0f} s")
        time.sleep(0.1)
    return time.perf_counter()


def _worker(pods: Pods) -> tuple[str, dict[str, Any]]:
    """One Running worker pod that is not rank 0 (the first by name): its UID and the pod."""
    candidates = sorted(pods.running().items(), key=lambda kv: kv[1]["metadata"]["name"])
    return next((u, p) for u, p in candidates if _rank(p) not in ("0", "master-0"))


def _fail_one(c: Cluster, ns: str, pods: Pods, exit_code: int) -> str:
    """Make one Running worker pod (not rank 0) fail with `exit_code` through kwok; its UID."""
    uid, pod = _worker(pods)
    annotations = {
        "kwok.torchrun.ai/outcome": "fail",
        "kwok.torchrun.ai/exit-code": str(exit_code),
        "kwok.torchrun.ai/duration": "0s",
    }
    c.rest.patch(PODS, pod["metadata"]["name"], {"metadata": {"annotations": annotations}}, ns)
    return uid


def _fail_all(c: Cluster, ns: str, pods: Pods) -> frozenset[str]:
    """Make one worker pod fail with an exit code that ends the attempt; the UIDs of the pods
    Running before (a whole-job restart replaces every one of them)."""
    before = frozenset(pods.running())
    _fail_one(c, ns, pods, RESTART_EXIT)
    return before


def _fail_in_place(c: Cluster, ns: str, pods: Pods, links: Links) -> int:
    """One worker's stand-in supervisor says torchrun exited RESTART_EXIT; the generation after
    the status's."""
    generation = int(links.status().get("inPlaceGeneration") or 0)
    links.fail(_worker(pods)[0], RESTART_EXIT)
    return generation + 1


class LostNode:
    """One worker pod's node, deleted (`lose`), and created again (`restore`)."""

    def __init__(self, c: Cluster, pods: Pods) -> None:
        self.c, self.pods = c, pods
        self.node: dict[str, Any] = {}
        self.uid = ""
        self.deleted_at: float | None = None  # when (perf_counter) its pod was first seen deleted

    def replaced(self, gone: str, nodes: int) -> bool:
        """The lost pod's rank runs again in a new pod (noting when the old one was deleted)."""
        if self.deleted_at is None and gone in self.pods.deleted():
            self.deleted_at = time.perf_counter()
        return len(self.pods.running(frozenset({gone}))) == nodes

    def lose(self) -> str:
        """Delete the node of a worker pod that is not rank 0; that pod's UID."""
        self.uid, pod = _worker(self.pods)
        self.deleted_at = None
        self.node = self.c.rest.get(NODES, pod["spec"]["nodeName"])
        self.c.rest.delete(NODES, self.node["metadata"]["name"])
        return self.uid

    def restore(self) -> None:
        """The deleted node again: its name, labels, annotations and capacity (kwok makes it Ready)."""
        meta = self.node["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {k: meta[k] for k in ("name", "labels", "annotations") if k in meta},
            "spec": {},
            "status": {"capacity": self.node["status"]["capacity"]},
        }
        self.c.rest.create(NODES, body)


def run(c: Cluster, subject: Subject, ns: str, nodes: int) -> dict[str, Any]:
    """The steps of the module docstring for one subject in a fresh namespace (deleted after)."""
    c.rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    extra: tuple[str, ...] = ()
    url = ""
    if subject == OURS_IN_PLACE:
        port = free_port()
        url = f"https://127.0.0.1:{port}/v1/progress"
        extra = (f"--progress-bind-address=127.0.0.1:{port}", f"--progress-url={url}")
    proc, _ = start(c, subject, ns, c.qps, c.burst, extra)
    pods = Pods(c.rest, ns)
    links = Links(c.rest, ns, JOB, url, pods, c.kubeconfig.parent / f"tokens-{ns}") if extra else None
    lost = LostNode(c, pods)
    steps: dict[str, dict[str, Any]] = {}

    def step(name: str, act: Callable[[], Any], done: Callable[[Any], bool]) -> None:
        window = Window(c.kubeconfig.parent, ns)
        cpu0, kcm0 = cpu_seconds(proc.pid), cpu_seconds(kcm_pid(c.kubeconfig))
        before = frozenset(pods.running())
        t0 = time.perf_counter()
        acted = act()
        end = _wait(lambda: done(acted), f"{subject.name} {name}")
        settled = None
        if links is not None and name != "delete":  # every rank runs the status's generation
            settled = _wait(lambda: links.settled(nodes), f"{subject.name} {name}: every rank running") - t0
        writes = window.wait_quiet(quiet=5, timeout=900)
        own, cluster = writes_of(subject, writes)
        steps[name] = {
            "seconds": end - t0,
            "settled_s": settled,
            "pods_deleted": len(before & pods.deleted()),
            "own_writes": own,
            "writes": cluster,
            "agents": by_verb(writes),
            "cpu_s": cpu_seconds(proc.pid) - cpu0,
            "kcm_cpu_s": cpu_seconds(kcm_pid(c.kubeconfig)) - kcm0,
        }
        if name == "lost node" and lost.deleted_at is not None:
            steps[name]["pod_deleted_s"] = lost.deleted_at - t0  # the pod garbage collector's
        brief = {k: v for k, v in steps[name].items() if k != "agents"}
        print(f"[{time.strftime('%H:%M:%S')}]   W2 {subject.name} {name}: {brief}", flush=True)

    try:
        step(
            "start",
            lambda: c.rest.create(subject.resource, MAKE[subject](nodes), ns),
            lambda _: len(pods.running()) == nodes,
        )
        step(
            "pod retry",
            lambda: _fail_one(c, ns, pods, RETRIABLE_EXIT),
            lambda failed: len(pods.running(frozenset({failed}))) == nodes,
        )
        if links is not None:
            step(
                "whole-job restart in place",
                lambda: _fail_in_place(c, ns, pods, links),
                lambda generation: links.settled(nodes, generation),
            )
        elif subject.ours:
            step(
                "whole-job restart",
                lambda: _fail_all(c, ns, pods),
                lambda before: len(pods.running(before)) == nodes,
            )
        step("lost node", lost.lose, lambda gone: lost.replaced(gone, nodes))
        lost.restore()
        step("delete", lambda: c.rest.delete(subject.resource, JOB, ns), lambda _: pods.count() == 0)
        return {"steps": steps, "peak_rss_mib": rss_kib(proc.pid, "VmHWM") / 1024}
    finally:
        if links is not None:
            links.stop()
        pods.stop()
        stop(proc)
        kubectl(c.kubeconfig, "delete", "namespace", ns, "--timeout=900s")


SETTINGS = {"default 20/30": KCM_DEFAULT, "production 100/200": KCM_PRODUCTION}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--w2-nodes", type=int, default=256, help="W2: the job's nodes (kwok nodes: one more)")
    ap.add_argument(
        "--w2-subjects",
        default=",".join(SLUGS.values()),
        help=f"W2: comma-separated, of {','.join(SLUGS.values())} (default all)",
    )
    ap.add_argument(
        "--w2-settings", default="default,production", help="W2: kube-controller-manager client settings"
    )


SETTING_NAMES = {"default": "default 20/30", "production": "production 100/200"}


def main(args: argparse.Namespace, to_home: Path) -> str:
    """W2 on a control plane of its own, at each chosen kube-controller-manager setting, each
    chosen subject in turn (training-operator first); the tables to print."""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    subjects = [s for s in SUBJECTS if SLUGS[s] in args.w2_subjects.split(",")]
    settings = [SETTING_NAMES[name] for name in args.w2_settings.split(",")]
    results: dict[tuple[str, str], dict[str, Any]] = {}
    with control_plane(nodes=args.w2_nodes + 1, kcm=SETTINGS[settings[0]]) as kubeconfig:
        c = Cluster(kubeconfig, bench_client(kubeconfig), to_home, args.threads, args.qps, args.burst)
        install_crds(kubeconfig, REPO / "crd")
        c.rest.create(TORCHRUNQUEUES, big_queue())
        if TRAINING_OPERATOR in subjects:
            prepare_training_operator(kubeconfig, c.rest, to_home)
        for setting in settings:
            kcm = SETTINGS[setting]
            if setting != settings[0]:
                restart_kube_controller_manager(c.kubeconfig, kcm, c.rest)
            for subject in subjects:
                ns = f"w2-{SLUGS[subject]}-{kcm[0]}"
                results[(setting, subject.name)] = run(c, subject, ns, args.w2_nodes)
    head = (
        f"W2 one big job, {started}: {args.w2_nodes + 1} kwok nodes of {GPUS} GPUs (one spare for the "
        f"lost node's replacement), one job of {args.w2_nodes} pods of {GPUS} GPUs; controllers at "
        f"client QPS {args.qps} / burst {args.burst}, {args.threads} workers"
    )
    stand_in = f"STAND-IN: {STAND_IN}" if OURS_IN_PLACE in subjects else ""
    return f"{head}\n\n{steps_table(results)}\n\n{writers_table(results)}\n\n{stand_in}".rstrip()


def by_verb(writes: list[dict[str, Any]]) -> dict[str, int]:
    """Writes by writer (auditlog.by_agent), verb and resource: `job-controller create pods`."""
    out: dict[str, int] = {}
    for e in writes:
        ref = e.get("objectRef") or {}
        resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = f"{next(iter(by_agent([e])))} {e.get('verb')} {resource}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def writers_table(results: dict[tuple[str, str], dict[str, Any]]) -> str:
    """Each step's writes by writer, verb and resource, the most first (the test bed's node agent's
    included here)."""
    rows: list[list[object]] = []
    for (setting, name), r in results.items():
        for step, m in r["steps"].items():
            rows.append([setting, name, step, ", ".join(f"{k} {n}" for k, n in m["agents"].items())])
    return table(["kcm client", "subject", "step", "writes by writer, verb and resource"], rows)


def steps_table(results: dict[tuple[str, str], dict[str, Any]]) -> str:
    """One row per setting, subject and step; seconds as a ratio to training-operator's same step
    (when it ran); in place, the seconds until every rank ran the status's generation."""
    rows = []
    for (setting, name), r in results.items():
        peer = (results.get((setting, TRAINING_OPERATOR.name)) or {}).get("steps", {})
        for step, m in r["steps"].items():
            ratio = f"{m['seconds'] / peer[step]['seconds']:.2f}×" if step in peer else "-"
            settled = "-" if m.get("settled_s") is None else f"{m['settled_s']:.1f}"
            seconds = f"{m['seconds']:.1f}"
            if "pod_deleted_s" in m:
                seconds += f" (pod deleted {m['pod_deleted_s']:.1f})"
            rows.append(
                [
                    setting,
                    name,
                    step,
                    seconds,
                    ratio,
                    settled,
                    m["pods_deleted"],
                    m["own_writes"],
                    m["writes"],
                    f"{m['cpu_s']:.1f}",
                    f"{m['kcm_cpu_s']:.1f}",
                    f"{r['peak_rss_mib']:.0f}",
                ]
            )
    headers = ["kcm client", "subject", "step", "seconds", "÷ t-o", "every rank running s", "pods deleted"]
    return table([*headers, "own writes", "all writes", "CPU s", "kcm CPU s", "peak RSS MiB"], rows)
