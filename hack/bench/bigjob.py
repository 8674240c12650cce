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
4. `delete`: the job deleted (background propagation) → every pod of the namespace gone.
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
    install_crds,
    kcm_pid,
    kubectl,
    restart_kube_controller_manager,
    rss_kib,
    table,
    torchrunjob,
)
from controllers import prepare_training_operator, pytorchjob, stop
from workload import (
    OURS,
    SUBJECTS,
    TRAINING_OPERATOR,
    Cluster,
    Subject,
    start,
    writes_of,
)

from controller.api.resources import TORCHRUNQUEUES
from controller.rest import RESTClient
from controller.rest.resources import NAMESPACES, PODS

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


def big_torchrunjob(nodes: int) -> dict[str, Any]:
    failure_policy = {"maxRestarts": 1, "retriableExitCodes": [RETRIABLE_EXIT]}
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


def _fail_one(c: Cluster, ns: str, pods: Pods, exit_code: int) -> str:
    """Make one Running worker pod (not rank 0) fail with `exit_code` through kwok; its UID."""
    candidates = sorted(pods.running().items(), key=lambda kv: kv[1]["metadata"]["name"])
    uid, pod = next((u, p) for u, p in candidates if _rank(p) not in ("0", "master-0"))
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


def run(c: Cluster, subject: Subject, ns: str, nodes: int) -> dict[str, Any]:
    """The steps of the module docstring for one subject in a fresh namespace (deleted after)."""
    c.rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    proc, _ = start(c, subject, ns, c.qps, c.burst)
    pods = Pods(c.rest, ns)
    steps: dict[str, dict[str, Any]] = {}

    def step(name: str, act: Callable[[], Any], done: Callable[[Any], bool]) -> None:
        window = Window(c.kubeconfig.parent, ns)
        cpu0, kcm0 = cpu_seconds(proc.pid), cpu_seconds(kcm_pid(c.kubeconfig))
        t0 = time.perf_counter()
        acted = act()
        end = _wait(lambda: done(acted), f"{subject.name} {name}")
        writes = window.wait_quiet(quiet=5, timeout=900)
        own, cluster = writes_of(subject, writes)
        steps[name] = {
            "seconds": end - t0,
            "own_writes": own,
            "writes": cluster,
            "agents": by_verb(writes),
            "cpu_s": cpu_seconds(proc.pid) - cpu0,
            "kcm_cpu_s": cpu_seconds(kcm_pid(c.kubeconfig)) - kcm0,
        }
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
        if subject.ours:
            step(
                "whole-job restart",
                lambda: _fail_all(c, ns, pods),
                lambda before: len(pods.running(before)) == nodes,
            )
        step("delete", lambda: c.rest.delete(subject.resource, JOB, ns), lambda _: pods.count() == 0)
        return {"steps": steps, "peak_rss_mib": rss_kib(proc.pid, "VmHWM") / 1024}
    finally:
        pods.stop()
        stop(proc)
        kubectl(c.kubeconfig, "delete", "namespace", ns, "--timeout=900s")


SETTINGS = {"default 20/30": KCM_DEFAULT, "production 100/200": KCM_PRODUCTION}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--w2-nodes", type=int, default=256, help="W2: kwok nodes and the job's nodes")


def main(args: argparse.Namespace, to_home: Path) -> str:
    """W2 on a control plane of its own, at both kube-controller-manager settings, training-operator
    then ours at each; the tables to print."""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: dict[tuple[str, str], dict[str, Any]] = {}
    with control_plane(nodes=args.w2_nodes, kcm=KCM_DEFAULT) as kubeconfig:
        c = Cluster(kubeconfig, bench_client(kubeconfig), to_home, args.threads, args.qps, args.burst)
        install_crds(kubeconfig, REPO / "crd")
        c.rest.create(TORCHRUNQUEUES, big_queue())
        prepare_training_operator(kubeconfig, c.rest, to_home)
        for setting, kcm in SETTINGS.items():
            if kcm != KCM_DEFAULT:
                restart_kube_controller_manager(c.kubeconfig, kcm, c.rest)
            for subject in SUBJECTS:
                ns = f"w2-{subject.name.split('-')[0]}-{kcm[0]}"
                results[(setting, subject.name)] = run(c, subject, ns, args.w2_nodes)
    head = (
        f"W2 one big job, {started}: {args.w2_nodes} kwok nodes of {GPUS} GPUs, one job of "
        f"{args.w2_nodes} pods of {GPUS} GPUs; controllers at client QPS {args.qps} / burst "
        f"{args.burst}, {args.threads} workers"
    )
    return f"{head}\n\n{steps_table(results)}\n\n{writers_table(results)}"


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
    """One row per setting, subject and step; seconds as a ratio to training-operator's same step."""
    rows = []
    for (setting, name), r in results.items():
        peer = results[(setting, TRAINING_OPERATOR.name)]["steps"]
        for step, m in r["steps"].items():
            ratio = f"{m['seconds'] / peer[step]['seconds']:.2f}×" if step in peer else "-"
            rows.append(
                [
                    setting,
                    name,
                    step,
                    f"{m['seconds']:.1f}",
                    ratio,
                    m["own_writes"],
                    m["writes"],
                    f"{m['cpu_s']:.1f}",
                    f"{m['kcm_cpu_s']:.1f}",
                    f"{r['peak_rss_mib']:.0f}",
                ]
            )
    headers = ["kcm client", "subject", "step", "seconds", "÷ t-o", "own writes", "all writes"]
    return table([*headers, "CPU s", "kcm CPU s", "peak RSS MiB"], rows)
