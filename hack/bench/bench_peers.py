"""This controller side by side with Kubeflow's training-operator and Trainer v2, on one control
plane, in one run.

W1 (burst): N two-node jobs submitted at once → all 2N pods Running, for each of
- training-operator v1.9.3 (hack/testbed/build-training-operator.sh): a PyTorchJob of 1 master +
  1 worker, pods and Services created by the operator itself;
- Kubeflow Trainer v2.3.0 with JobSet v0.12.0 (hack/testbed/build-trainer.sh; trainer.py runs both
  out of cluster, their webhooks served on 127.0.0.1): a TrainJob of 2 nodes on the torch
  ClusterTrainingRuntime, which Trainer turns into a JobSet, JobSet into an Indexed Job and a
  headless Service, whose pods kube-controller-manager's Job controller creates;
- torchrun-controller (this checkout): a TorchrunJob of 2 nodes, through an Indexed Job whose pods
  kube-controller-manager's Job controller creates;
- the ceiling of the Indexed-Job design: a bare client creating the same Indexed Jobs + headless
  Services, no controller;
at kube-controller-manager's default client rate (QPS 20 / burst 30) and at a production one
(100 / 200), the same nodes, every controller at client QPS 50 / burst 100 with 4 workers (JobSet
v0.12.0 has no setting for its workers: it runs one). Each runs in a namespace of its own, alone:
the namespace before it is deleted (and gone) first. `--subjects` runs some of them only.

Reported: jobs/s (first submit → last pod Running) and its ratio to training-operator's and to the
ceiling's at the same setting; how long the N creates took (16 client threads, while the
controller already works) and the API server's median time per create (audit log); per job,
submit → first pod and submit → all pods Running (p50 / p99); writes at the API server from its
audit log per job: the subject's own (by user agent; Trainer's and JobSet's both) and every
write in the namespace, the submits included, but not the test bed node agent's (a kwok `Logs`
per worker pod of ours: no real cluster makes it); peak RSS and CPU seconds of the controller
process (from submit to quiet; for Trainer v2 the sum of its two processes, and each) and the CPU
seconds kube-controller-manager spent meanwhile; and our controller's own account of its passes
(its /metrics): passes per job, mean pass time and queue wait, and how long its client waited for
its QPS limit. `--diagnose` adds this controller with its own client limit out of the way (QPS
500 / burst 1000), and with 4× the workers at the same client limit, to show what bounds it.
Then admission (admission.py): `kubectl create` of N TorchrunJobs (as shipped and through CRD
variants) against N PyTorchJobs, before any workload.

W2 (one 256-node job: start, one pod's retry, our whole-job restart — recreating and in place —,
a lost node, delete) is bigjob.py's, W3 (N jobs at rest: RSS, idle CPU, writes per resync, our
reconcile pass profiled) atrest.py's, W4 (chaos during a burst of ours: SIGKILLs of the leader, an
API server restart, a forced-410 compaction; the violation count, failover, writes from a deposed
leader) chaos.py's, each on a control plane of its own and at both kube-controller-manager
settings; `--workloads` picks among
w1, w2, w3, w4 (W1's `--subjects` apply to W1 only).

    python hack/bench/bench_peers.py [--jobs 200] [--admission-rounds 2] [--workloads w1,w2,w3,w4]
        [--subjects training-operator,trainer,torchrun,ceiling] [--w4-jobs 1000 --w4-kills 50]
        [--w2-nodes 256 --w2-subjects training,torchrun,inplace --w2-settings default,production]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import admission
import atrest
import bigjob
import chaos
from auditlog import Window, by_agent, server_seconds
from burst import QUEUE, Arrivals, bench_queue, per_job, plain_maker, submit, wait_pods_running
from common import (
    BENCH_USER_AGENT,
    KCM_DEFAULT,
    KCM_SETTINGS,
    REPO,
    bench_client,
    control_plane,
    cpu_seconds,
    install_crds,
    kcm_pid,
    kubectl,
    percentile,
    restart_kube_controller_manager,
    rss_kib,
    table,
    torchrunjob,
)
from controllers import (
    PYTORCHJOBS,
    TORCHRUN_USER_AGENT,
    TRAINING_OPERATOR_USER_AGENT,
    build_training_operator,
    pass_profile,
    prepare_training_operator,
    pytorchjob,
    start_torchrun_controller,
    start_training_operator,
    stop,
)
from trainer import (
    JOBSET_USER_AGENT,
    TRAINER_USER_AGENT,
    TRAINJOBS,
    TrainerPeer,
    build_trainer,
    prepare_trainer,
    start_trainer,
    trainjob,
)

from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.rest import RESTClient
from controller.rest.resources import NAMESPACES, PODS

# the test bed's stand-in for a kubelet (hack/testbed/nodeagent) writes a kwok `Logs` object for each
# of our worker pods, so `kubectl logs` has lines to show; no real cluster has that write
TESTBED_AGENTS = frozenset({"testbed-node-agent"})


@dataclass
class Setup:
    """What every subject of a run shares: the control plane, the bench's client, the knobs."""

    kubeconfig: Path
    rest: RESTClient
    to_home: Path
    jobs: int
    threads: int
    qps: int
    burst: int
    metrics_ports: dict[int, int] = field(default_factory=dict)  # our controller's, by its pid
    trainer_home: Path | None = None  # hack/testbed/build-trainer.sh's, when Trainer v2 runs


@dataclass
class Subject:
    """One way of running the burst: its name, the user agent its writes carry, how to start its
    controller for a namespace (None: no controller), how to submit one job; `also`: the user
    agents of its other controllers (Trainer v2's JobSet), whose writes are its own too."""

    name: str
    agent: str
    start: Callable[[Setup, str], Any] | None
    make: Callable[[Setup, str], Callable[[str], None]]
    also: tuple[str, ...] = ()


def _start_training_operator(s: Setup, ns: str) -> Any:
    log = s.kubeconfig.parent / "logs" / f"training-operator-{ns}.log"
    return start_training_operator(
        s.kubeconfig, s.rest, s.to_home, ns, threads=s.threads, qps=s.qps, burst=s.burst, log=log
    )


def _torchrun(s: Setup, ns: str, threads: int, qps: int, burst: int) -> Any:
    log = s.kubeconfig.parent / "logs" / f"torchrun-controller-{ns}.log"
    proc, port = start_torchrun_controller(
        s.kubeconfig, ns, threadiness=threads, qps=qps, burst=burst, log=log
    )
    s.metrics_ports[proc.pid] = port
    return proc


def _start_torchrun(s: Setup, ns: str) -> Any:
    return _torchrun(s, ns, s.threads, s.qps, s.burst)


def _make_pytorchjob(s: Setup, ns: str) -> Callable[[str], None]:
    def make(name: str) -> None:
        s.rest.create(PYTORCHJOBS, pytorchjob(name), ns)

    return make


def _make_torchrunjob(s: Setup, ns: str) -> Callable[[str], None]:
    def make(name: str) -> None:
        s.rest.create(TORCHRUNJOBS, torchrunjob(name, QUEUE), ns)

    return make


def _start_trainer(s: Setup, ns: str) -> TrainerPeer:
    assert s.trainer_home, "Trainer v2 was not built"
    log = s.kubeconfig.parent / "logs" / f"trainer-{ns}.log"
    work = s.kubeconfig.parent / f"trainer-{ns}"
    return start_trainer(
        s.kubeconfig, s.rest, s.trainer_home, work, threads=s.threads, qps=s.qps, burst=s.burst, log=log
    )


def _make_trainjob(s: Setup, ns: str) -> Callable[[str], None]:
    def make(name: str) -> None:
        s.rest.create(TRAINJOBS, trainjob(name), ns)

    return make


def _start_torchrun_unthrottled(s: Setup, ns: str) -> Any:
    return _torchrun(s, ns, s.threads, 500, 1000)


def _start_torchrun_more_workers(s: Setup, ns: str) -> Any:
    return _torchrun(s, ns, 4 * s.threads, s.qps, s.burst)


TRAINING_OPERATOR, CEILING = "training-operator", "ceiling (Jobs + Services)"
SUBJECTS = (
    Subject(TRAINING_OPERATOR, TRAINING_OPERATOR_USER_AGENT, _start_training_operator, _make_pytorchjob),
    Subject(
        "Trainer v2 (TrainJob + JobSet)",
        TRAINER_USER_AGENT,
        _start_trainer,
        _make_trainjob,
        (JOBSET_USER_AGENT,),
    ),
    Subject("torchrun-controller", TORCHRUN_USER_AGENT, _start_torchrun, _make_torchrunjob),
    Subject(CEILING, BENCH_USER_AGENT, None, lambda s, ns: plain_maker(s.rest, ns)),
)
# --diagnose: ours with its own client limit out of the way (500 / 1000), and with 4× the workers
# at the same client limit, to see what bounds it
DIAGNOSTICS = (
    Subject(
        "torchrun-controller@500/1000", TORCHRUN_USER_AGENT, _start_torchrun_unthrottled, _make_torchrunjob
    ),
    Subject(
        "torchrun-controller@4×workers", TORCHRUN_USER_AGENT, _start_torchrun_more_workers, _make_torchrunjob
    ),
)


def subject_key(subject: Subject) -> str:
    """A subject's name for --subjects: the first word of its name, lower case, without
    `-controller` (training-operator, trainer, torchrun, ceiling)."""
    return subject.name.split()[0].lower().removesuffix("-controller")


def select_subjects(ap: argparse.ArgumentParser, names: str, diagnose: bool) -> tuple[Subject, ...]:
    """The subjects `--subjects` names (comma-separated keys), then the diagnostics if asked."""
    keys = [subject_key(subject) for subject in SUBJECTS]
    chosen = set(names.split(","))
    if chosen - set(keys):
        ap.error(f"--subjects: unknown {', '.join(sorted(chosen - set(keys)))} (known: {', '.join(keys)})")
    subjects = tuple(subject for subject in SUBJECTS if subject_key(subject) in chosen)
    return subjects + (DIAGNOSTICS if diagnose else ())


def _processes(started: Any) -> dict[str, Any]:
    """The controller processes a subject started, by program (Trainer v2 runs two)."""
    if isinstance(started, TrainerPeer):
        return dict(started.processes)
    return {"": started} if started else {}


def run_burst(s: Setup, subject: Subject, kcm: tuple[int, int]) -> dict[str, Any]:
    """W1 for one subject at one kube-controller-manager setting, in a fresh namespace deleted after."""
    slug = subject.name.split()[0].lower().replace("@", "-").replace("/", "-").replace("×", "x")
    ns = f"w1-{slug}-{kcm[0]}"
    s.rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    proc = subject.start(s, ns) if subject.start else None
    procs = _processes(proc)
    try:
        pods = Arrivals(s.rest, PODS, ns)
        window = Window(s.kubeconfig.parent, ns)
        kcm_process = kcm_pid(s.kubeconfig)
        cpu0, kcm0 = {k: cpu_seconds(p.pid) for k, p in procs.items()}, cpu_seconds(kcm_process)
        sent = submit(subject.make(s, ns), s.jobs)
        submitted = time.perf_counter()
        end = wait_pods_running(pods, 2 * s.jobs)
        writes = window.wait_quiet()
        pods.stop()
        first = per_job(pods.times, min)
        running = per_job(pods.running, max)
        agents = by_agent(writes)
        mine = tuple(agent.rstrip("/") for agent in (subject.agent, *subject.also))
        own = sum(n for a, n in agents.items() if a.startswith(mine))
        cluster = sum(n for a, n in agents.items() if a not in TESTBED_AGENTS)
        submits = [server_seconds(e) for e in writes if e.get("userAgent") == BENCH_USER_AGENT]
        rss = {k: rss_kib(p.pid, "VmHWM") / 1024 for k, p in procs.items()}
        cpu = {k: cpu_seconds(p.pid) - cpu0[k] for k, p in procs.items()}
        metrics = s.metrics_ports.get(getattr(proc, "pid", -1))  # ours only
        return {
            "jobs_per_s": s.jobs / (end - min(sent.values())),
            "submit_s": submitted - min(sent.values()),
            "submit_ms": statistics.median(submits) * 1000,
            "first_pod": [first[j] - sent[j] for j in sent],
            "running": [running[j] - sent[j] for j in sent],
            "own_writes": own / s.jobs,
            "writes": cluster / s.jobs,
            "agents": {a: n / s.jobs for a, n in agents.most_common()},
            "rss_mib": sum(rss[k] for k in procs) if procs else None,
            "cpu_s": sum(cpu[k] for k in procs) if procs else None,
            "parts": {k: (rss[k], cpu[k]) for k in procs} if len(procs) > 1 else None,
            "kcm_cpu_s": cpu_seconds(kcm_process) - kcm0,
            "passes": pass_profile(metrics, s.jobs) if metrics else None,
        }
    finally:
        if isinstance(proc, TrainerPeer):
            proc.stop()
        elif proc:
            stop(proc)
        kubectl(s.kubeconfig, "delete", "namespace", ns, "--timeout=900s")


def _p50_p99(values: list[float]) -> str:
    return f"{percentile(values, 50):.1f} / {percentile(values, 99):.1f}"


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _ratio(value: float, base: dict[str, Any] | None) -> str:
    return f"{value / base['jobs_per_s']:.2f}×" if base else "-"


def _summed(r: dict[str, Any], i: int, fmt: str) -> str:
    """RSS (i 0) or CPU (i 1) of the subject's controllers: their sum, and each by program when
    several."""
    total = _num(r["rss_mib" if i == 0 else "cpu_s"], fmt)
    parts = r.get("parts")
    return f"{total} = {' + '.join(f'{v[i]:{fmt}} {k}' for k, v in parts.items())}" if parts else total


def burst_table(
    results: dict[tuple[str, str], dict[str, Any]], settings: list[str], subjects: tuple[Subject, ...]
) -> str:
    """One row per setting and subject; throughput as ratios to training-operator and the ceiling."""
    rows = []
    for setting in settings:
        peer = results.get((setting, TRAINING_OPERATOR))
        ceiling = results.get((setting, CEILING))
        for subject in subjects:
            r = results[(setting, subject.name)]
            rows.append(
                [
                    setting,
                    subject.name,
                    f"{r['jobs_per_s']:.2f}",
                    _ratio(r["jobs_per_s"], peer),
                    _ratio(r["jobs_per_s"], ceiling),
                    f"{r['submit_s']:.1f}",
                    f"{r['submit_ms']:.0f}",
                    _p50_p99(r["first_pod"]),
                    _p50_p99(r["running"]),
                    f"{r['own_writes']:.1f}",
                    f"{r['writes']:.1f}",
                    _summed(r, 0, ".0f"),
                    _summed(r, 1, ".1f"),
                    f"{r['kcm_cpu_s']:.1f}",
                ]
            )
    headers = ["kcm client", "subject", "jobs/s", "÷ t-o", "÷ ceiling", "submit s", "server ms/create"]
    headers += ["→1st pod p50/p99 s"]
    headers += ["→Running p50/p99 s", "own w/job", "all w/job", "RSS MiB", "CPU s", "kcm CPU s"]
    return table(headers, rows)


def passes_table(results: dict[tuple[str, str], dict[str, Any]]) -> str:
    """Our controller's own account of its passes (its /metrics), for the runs that have one."""
    rows = [
        [setting, subject, *(f"{v:.1f}" for v in r["passes"].values())]
        for (setting, subject), r in results.items()
        if r.get("passes")
    ]
    headers = ["kcm client", "subject", "passes / job", "pass ms (mean)", "queue wait ms (mean)"]
    return table([*headers, "client-limit wait s (total)"], rows)


def writers_table(results: dict[tuple[str, str], dict[str, Any]]) -> str:
    """Writes per job in each namespace by writer (user agent; kube-controller-manager by controller)."""
    rows = []
    for (setting, subject), r in results.items():
        rows.append([setting, subject, ", ".join(f"{a} {n:.1f}" for a, n in r["agents"].items())])
    return table(["kcm client", "subject", "writes per job by writer"], rows)


def admission_table(measured: dict[str, list[dict[str, float]]], n: int) -> str:
    """kubectl create of N objects per subject: client seconds and the server's ms per create,
    each as the median over the rounds, and as a ratio to the PyTorchJob's."""
    wall = {k: statistics.median(r["wall"] for r in v) for k, v in measured.items()}
    server = {k: statistics.median(r["server_p50"] for r in v) * 1000 for k, v in measured.items()}
    ref = "PyTorchJob"
    rows = [
        [
            k,
            " / ".join(f"{r['wall']:.2f}" for r in measured[k]),
            f"{wall[k] / wall[ref]:.2f}×",
            f"{server[k]:.1f}",
            f"{server[k] / server[ref]:.2f}×",
        ]
        for k in measured
    ]
    headers = [f"kubectl create of {n}", "seconds (each round)", "÷ PyTorchJob"]
    return table([*headers, "server ms/create p50", "÷ PyTorchJob"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=4, help="workers of both controllers")
    ap.add_argument("--qps", type=int, default=50, help="client QPS of both controllers")
    ap.add_argument("--burst", type=int, default=100, help="client burst of both controllers")
    ap.add_argument("--admission-rounds", type=int, default=2, help="0: no admission measurement")
    ap.add_argument("--keep-audit", type=Path, help="copy the API server's audit log here at the end")
    ap.add_argument("--diagnose", action="store_true", help="also ours at client QPS 500 / burst 1000")
    ap.add_argument(
        "--subjects",
        default=",".join(subject_key(subject) for subject in SUBJECTS),
        help="W1's subjects, comma-separated: training-operator,trainer,torchrun,ceiling (default all)",
    )
    ap.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="comma-separated: w1,w2,w3,w4 (default all)"
    )
    bigjob.add_arguments(ap)
    atrest.add_arguments(ap)
    ap.add_argument("--w4-jobs", type=int, default=1000, help="W4: two-node jobs in the burst")
    ap.add_argument("--w4-kills", type=int, default=50, help="W4: SIGKILLs of the leading replica")
    ap.add_argument("--w4-seed", type=int, default=1, help="W4: seed of the kills' moments")
    args = ap.parse_args()
    workloads = args.workloads.split(",")
    if set(workloads) - set(WORKLOADS):
        ap.error(f"--workloads: unknown {', '.join(sorted(set(workloads) - set(WORKLOADS)))}")
    subjects = select_subjects(ap, args.subjects, args.diagnose)
    # training-operator is a subject of W1-W3 (W4 is ours alone)
    to_home = build_training_operator() if set(workloads) - {"w4"} else Path()
    if "w1" in workloads:
        burst_workload(args, subjects, to_home)
    if "w2" in workloads:
        print(f"\n{bigjob.main(args, to_home)}", flush=True)
    if "w3" in workloads:
        print(f"\n{atrest.main(args, to_home)}", flush=True)
    if "w4" in workloads:
        chaos_workload(args)


WORKLOADS = ("w1", "w2", "w3", "w4")


def chaos_workload(args: argparse.Namespace) -> None:
    """W4 (chaos.py) at each kube-controller-manager setting, each on a control plane of its own;
    prints each run's table (its violation count among the rows) as it ends."""
    for setting, kcm in KCM_SETTINGS.items():
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        result = chaos.on_own_plane(kcm, jobs=args.w4_jobs, kills=args.w4_kills, seed=args.w4_seed, logs=None)
        print(f"\nW4 chaos during a burst, {started}, kcm client {setting}: {args.w4_jobs} two-node jobs,")
        print(f"{args.w4_kills} SIGKILLs of the leader of two replicas, one kube-apiserver restart, one")
        print(f"forced-410 etcd compaction\n\n{chaos.result_table(result, kcm)}", flush=True)


def burst_workload(args: argparse.Namespace, subjects: tuple[Subject, ...], to_home: Path) -> None:
    """W1 (and admission) on a control plane of its own; prints its tables."""
    trainer_home = build_trainer() if any(subject_key(x) == "trainer" for x in subjects) else None
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with control_plane(nodes=4, pods_per_node=max(110, 2 * args.jobs), kcm=KCM_DEFAULT) as kubeconfig:
        rest = bench_client(kubeconfig)
        s = Setup(kubeconfig, rest, to_home, args.jobs, args.threads, args.qps, args.burst)
        s.trainer_home = trainer_home
        install_crds(kubeconfig, REPO / "crd")
        rest.create(TORCHRUNQUEUES, bench_queue())
        prepare_training_operator(kubeconfig, rest, to_home)
        if trainer_home:
            prepare_trainer(kubeconfig, rest, trainer_home)
        measured = {}
        if args.admission_rounds:
            versions = admission.install_variants(kubeconfig)
            kinds = {"PyTorchJob": pytorchjob, **admission.torchrunjob_subjects(versions)}
            measured = admission.measure(kubeconfig, args.jobs, kinds, args.admission_rounds)
        results: dict[tuple[str, str], dict[str, Any]] = {}
        for setting, kcm in KCM_SETTINGS.items():
            if kcm != KCM_DEFAULT:
                restart_kube_controller_manager(kubeconfig, kcm, rest)
            for subject in subjects:
                results[(setting, subject.name)] = run_burst(s, subject, kcm)
                done = results[(setting, subject.name)]
                brief = {k: round(v, 2) for k, v in done.items() if isinstance(v, float)}
                print(f"[{time.strftime('%H:%M:%S')}] {setting} {subject.name}: {brief}", flush=True)
        if args.keep_audit:
            shutil.copyfile(kubeconfig.parent / "audit.log", args.keep_audit)
    print(
        f"\nW1 burst, {started}: {args.jobs} two-node jobs at once → all pods Running, 4 kwok nodes; "
        f"controllers at client QPS {args.qps} / burst {args.burst}, {args.threads} workers\n"
    )
    print(burst_table(results, list(KCM_SETTINGS), subjects))
    print()
    print(writers_table(results))
    print()
    print(passes_table(results))
    if measured:
        print(f"\nadmission: kubectl create -f of {args.jobs} objects, no controller watching\n")
        print(admission_table(measured, args.jobs))


if __name__ == "__main__":
    main()
