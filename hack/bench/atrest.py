"""W3 at rest: N jobs existing, most finished and some running, and each controller watching them.

Setup, for each controller in a namespace of its own (`populate`): N one-node jobs created at once
(16 client threads), `done` of them on a queue (ours) or with a pod template (training-operator's)
whose kwok pods succeed after 1 s, the rest on one whose pods keep running; the controller runs
at a setup client rate (QPS 500 / burst 1000) until every job is Succeeded or Running, then stops.
Then each is measured alone (`measure`), started again at the run's common client rate:
- RSS once it has synced and gone quiet (VmRSS, and its peak VmHWM);
- idle CPU seconds per minute over `idle` seconds;
- writes at the API server (audit log) in its namespace during that window, by its user agent,
  and per resync period (ours runs with `--resync-period`; training-operator v1.9.3 has no resync
  flag: controller-runtime's default sync period is 10 hours);
- ours only: passes it ran in the window (its /metrics) and its CPU seconds per pass, i.e. a
  resync's no-op reconciles per second per core.
Then (`profile_passes`, ours only, no controller running) the same reconciler built in this
process against the populated API server: informers synced, `reconciler.reconcile(key)` for every
job key single-threaded, timed (this thread's CPU) and under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from auditlog import Window, by_agent
from burst import bench_queue, submit
from common import (
    KCM_PRODUCTION,
    KCM_SETTINGS,
    REPO,
    bench_client,
    control_plane,
    cpu_seconds,
    install_crds,
    metric_sums,
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

from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.cmd.main import App
from controller.cmd.options import parse
from controller.metrics.registry import ControllerMetrics
from controller.rest import RESTClient
from controller.rest.resources import NAMESPACES, PODS

SETUP_RATE = (500, 1000)  # client QPS / burst of a controller while the jobs are being set up
DONE_QUEUE, RUN_QUEUE = "rest-done", "rest-run"
KWOK_SUCCEED = {"kwok.torchrun.ai/outcome": "succeed", "kwok.torchrun.ai/duration": "1s"}
KWOK_RUN = {"kwok.torchrun.ai/outcome": "run"}


def install_queues(rest: RESTClient) -> None:
    """The two TorchrunQueues of W3: pods that succeed after 1 s, pods that keep running."""
    for name, pod_annotations in ((DONE_QUEUE, KWOK_SUCCEED), (RUN_QUEUE, KWOK_RUN)):
        queue = bench_queue()
        queue["metadata"]["name"] = name
        queue["spec"]["podAnnotations"] = pod_annotations
        rest.create(TORCHRUNQUEUES, queue)


def one_node_torchrunjob(name: str, done: bool) -> dict[str, Any]:
    return torchrunjob(name, DONE_QUEUE if done else RUN_QUEUE, 1)


def one_node_pytorchjob(name: str, done: bool) -> dict[str, Any]:
    """A PyTorchJob of one master and no worker, its pod ending as kwok's annotations say."""
    job = pytorchjob(name)
    specs = job["spec"]["pytorchReplicaSpecs"]
    del specs["Worker"]
    specs["Master"]["template"]["metadata"] = {"annotations": KWOK_SUCCEED if done else KWOK_RUN}
    return job


def _our_state(job: dict[str, Any]) -> str:
    phase = (job.get("status") or {}).get("phase", "")
    return phase if phase in ("Succeeded", "Running") else ""


def _to_state(job: dict[str, Any]) -> str:
    conditions = (job.get("status") or {}).get("conditions") or []
    true = {c["type"] for c in conditions if c.get("status") == "True"}
    return "Succeeded" if "Succeeded" in true else "Running" if "Running" in true else ""


MAKE = {OURS: one_node_torchrunjob, TRAINING_OPERATOR: one_node_pytorchjob}
STATE = {OURS: _our_state, TRAINING_OPERATOR: _to_state}


def states(c: Cluster, subject: Subject, ns: str) -> dict[str, int]:
    """How many of the namespace's jobs are Succeeded, Running, neither."""
    out = {"Succeeded": 0, "Running": 0, "": 0}
    token = None
    while True:
        page = c.rest.list(subject.resource, ns, limit=500, continue_token=token)
        for job in page["items"]:
            out[STATE[subject](job)] += 1
        token = page["metadata"].get("continue")
        if not token:
            return out


def populate(
    c: Cluster, subject: Subject, ns: str, jobs: int, done: int, timeout: float = 3600
) -> dict[str, float]:
    """Create `jobs` jobs in `ns` (`done` of them finishing), run the subject at the setup rate until
    every job is Succeeded or Running, stop it; seconds for the creates and for all of it."""
    c.rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    t0 = time.perf_counter()
    proc, _ = start(c, subject, ns, *SETUP_RATE)
    try:

        def create(name: str) -> None:
            c.rest.create(subject.resource, MAKE[subject](name, finishes(name, done)), ns)

        submit(create, jobs)
        created = time.perf_counter() - t0
        deadline = time.monotonic() + timeout
        while (now := states(c, subject, ns)) != {"Succeeded": done, "Running": jobs - done, "": 0}:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise TimeoutError(f"{subject.name}: jobs never settled: {now}")
            time.sleep(5)
        running = sum(
            1 for p in c.rest.list(PODS, ns)["items"] if (p.get("status") or {}).get("phase") == "Running"
        )
        if running != jobs - done:
            raise RuntimeError(f"{subject.name}: {running} pods Running, want {jobs - done}")
    finally:
        stop(proc)
    return {"create_s": created, "setup_s": time.perf_counter() - t0}


def _reconciles(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return metric_sums(text, 'controller="torchrunjob"').get("controller_reconcile_total", 0.0)


def measure(c: Cluster, subject: Subject, ns: str, jobs: int, idle: float, resync: float) -> dict[str, Any]:
    """The subject at the common client rate over the populated namespace: RSS after sync, idle
    CPU, writes per resync, and (ours) passes per CPU second; see the module docstring."""
    extra = ("--resync-period", str(resync)) if subject.ours else ()
    window = Window(c.kubeconfig.parent, ns)
    t0 = time.perf_counter()
    proc, port = start(c, subject, ns, c.qps, c.burst, extra)
    try:
        ready = time.perf_counter() - t0
        start_cpu = cpu_seconds(proc.pid)
        startup_writes = window.wait_quiet(quiet=15, timeout=1800)
        quiet_s = time.perf_counter() - t0
        start_passes = _reconciles(port) if port else None
        start_cpu = cpu_seconds(proc.pid) - start_cpu
        rss = rss_kib(proc.pid) / 1024
        idle_window = Window(c.kubeconfig.parent, ns)
        cpu0, passes0 = cpu_seconds(proc.pid), _reconciles(port) if port else 0.0
        time.sleep(idle)
        cpu = cpu_seconds(proc.pid) - cpu0
        passes = _reconciles(port) - passes0 if port else None
        own, cluster = writes_of(subject, idle_window.writes())
        return {
            "ready_s": ready,
            "quiet_s": quiet_s,
            "startup_own_writes": writes_of(subject, startup_writes)[0],
            "startup_passes": start_passes,
            "startup_cpu_s": start_cpu,
            "rss_mib": rss,
            "peak_rss_mib": rss_kib(proc.pid, "VmHWM") / 1024,
            "idle_cpu_s_per_min": 60 * cpu / idle,
            "idle_own_writes": own,
            "idle_writes": cluster,
            "own_writes_per_resync": own / (idle / resync) if subject.ours else None,
            "idle_passes": passes,
            "passes_per_cpu_s": passes / cpu if passes and cpu else None,
            "jobs": jobs,
        }
    finally:
        stop(proc)


def profile_passes(c: Cluster, ns: str, out: Path | None = None, top: int = 15) -> dict[str, Any]:
    """Our reconciler in this process over the populated namespace, no controller running: every
    job key reconciled once to warm the per-job trackers, then once more timed and profiled."""
    opts = parse(["--kubeconfig", str(c.kubeconfig), "--namespace", ns, "--log-level", "warning"])
    app = App(opts, ControllerMetrics())
    stop_event = threading.Event()
    window = Window(c.kubeconfig.parent, ns)
    app.factory.start(stop_event)
    app.optional_informers.start(stop_event)
    try:
        t0 = time.perf_counter()
        if not all(app.factory.wait_for_cache_sync(600).values()):
            raise RuntimeError("caches did not sync")
        sync_s = time.perf_counter() - t0
        reconciler = app.job_controller.reconciler
        keys = sorted(f"{ns}/{j['metadata']['name']}" for j in app.factory.lister_for(TORCHRUNJOBS).list(ns))
        rounds = []
        profiler = cProfile.Profile()
        for profiled in (False, True):
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            if profiled:
                profiler.enable()
            for key in keys:
                reconciler.reconcile(key)
            if profiled:
                profiler.disable()
            rounds.append((time.thread_time() - cpu0, time.perf_counter() - wall0))
        # the profiled round is slower by the profiler's own cost: time one more, unprofiled
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        for key in keys:
            reconciler.reconcile(key)
        rounds.append((time.thread_time() - cpu0, time.perf_counter() - wall0))
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)
        writes = by_agent(window.writes())
        result = {
            "keys": len(keys),
            "sync_s": sync_s,
            "rounds": rounds,  # (thread CPU s, wall s): warm-up, profiled, timed
            "passes_per_cpu_s": len(keys) / rounds[2][0],
            "us_per_pass": 1e6 * rounds[2][0] / len(keys),
            "writes": dict(writes),
            "profile": text.getvalue(),
        }
        if out:
            out.write_text(_profile_report(result, ns))
        return result
    finally:
        stop_event.set()
        app.factory.shutdown()


def _profile_report(r: dict[str, Any], ns: str) -> str:
    (wcpu, wwall), (pcpu, pwall), (cpu, wall) = r["rounds"]
    rate = f"{r['passes_per_cpu_s']:.0f} passes per CPU second ({r['us_per_pass']:.0f} µs per pass)"
    head = [
        f"W3 in-process resync profile, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, namespace {ns}",
        f"{r['keys']} job keys; informers synced in {r['sync_s']:.1f} s",
        f"round 1 (warm-up, trackers created): {wcpu:.2f} s CPU, {wwall:.2f} s wall",
        f"round 2 (under cProfile): {pcpu:.2f} s CPU, {pwall:.2f} s wall",
        f"round 3 (timed): {cpu:.2f} s CPU, {wall:.2f} s wall = {rate}",
        f"writes at the API server during the three rounds, by user agent: {r['writes'] or 'none'}",
        "",
    ]
    return "\n".join(head) + str(r["profile"])


def finishes(name: str, done: int) -> bool:
    """Whether job `name` (`j0042`) is one of the first `done`, the ones whose pods succeed."""
    return int(name[1:]) < done


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--w3-jobs", type=int, default=5000, help="W3: jobs per controller")
    ap.add_argument("--w3-running", type=int, default=1000, help="W3: of which still running")
    ap.add_argument("--w3-idle", type=float, default=180, help="W3: seconds of the idle window")
    ap.add_argument("--w3-resync", type=float, default=60, help="W3: our --resync-period")
    ap.add_argument("--w3-profile", type=Path, default=Path("/tmp/w3-profile.txt"), help="W3: profile file")


def main(args: argparse.Namespace, to_home: Path) -> str:
    """W3 on a control plane of its own: both controllers' jobs set up with kube-controller-manager
    at 100/200 (to get there sooner), then each controller measured at its default 20/30 and again
    at 100/200; the tables to print."""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    jobs, done = args.w3_jobs, args.w3_jobs - args.w3_running
    setups, results = {}, {}
    with control_plane(nodes=4, pods_per_node=max(110, jobs), kcm=KCM_PRODUCTION) as kubeconfig:
        c = Cluster(kubeconfig, bench_client(kubeconfig), to_home, args.threads, args.qps, args.burst)
        install_crds(kubeconfig, REPO / "crd")
        install_queues(c.rest)
        prepare_training_operator(kubeconfig, c.rest, to_home)
        for subject in SUBJECTS:
            setups[subject] = populate(c, subject, f"w3-{subject.name.split('-')[0]}", jobs, done)
            print(f"[{time.strftime('%H:%M:%S')}]   W3 {subject.name} set up: {setups[subject]}", flush=True)
        for setting, kcm in KCM_SETTINGS.items():
            restart_kube_controller_manager(c.kubeconfig, kcm, c.rest)
            for subject in SUBJECTS:
                ns = f"w3-{subject.name.split('-')[0]}"
                results[(setting, subject)] = measure(c, subject, ns, jobs, args.w3_idle, args.w3_resync)
                done_at = results[(setting, subject)]
                print(f"[{time.strftime('%H:%M:%S')}]   W3 {setting} {subject.name}: {done_at}", flush=True)
        profile = profile_passes(c, f"w3-{OURS.name.split('-')[0]}", args.w3_profile)
    head = (
        f"W3 at rest, {started}: {jobs} one-node jobs per controller ({done} Succeeded, "
        f"{jobs - done} Running), 4 kwok nodes; set up at kcm client 100/200, measured at each "
        "setting in turn; controllers at "
        f"client QPS {args.qps} / burst {args.burst}, {args.threads} workers; ours with "
        f"--resync-period {args.w3_resync:.0f}; idle window {args.w3_idle:.0f} s"
    )
    (_, _), (_, _), (cpu, wall) = profile["rounds"]
    tail = (
        f"in process (ours, {profile['keys']} keys, single-threaded, caches synced): one full pass "
        f"{cpu:.2f} s CPU ({wall:.2f} s wall) = {profile['passes_per_cpu_s']:.0f} passes per CPU "
        f"second; writes {profile['writes'] or 'none'}; profile in {args.w3_profile}"
    )
    return f"{head}\n\n{rest_table(setups, results)}\n\n{tail}"


def rest_table(
    setups: dict[Subject, dict[str, float]], results: dict[tuple[str, Subject], dict[str, Any]]
) -> str:
    """One row per kube-controller-manager setting and controller; RSS and idle CPU also as ratios
    to training-operator's at the same setting."""

    def num(value: float | None, fmt: str = ".1f") -> str:
        return "-" if value is None else format(value, fmt)

    rows: list[list[object]] = []
    for (setting, subject), r in results.items():
        peer = results[(setting, TRAINING_OPERATOR)]
        rows.append(
            [
                setting,
                subject.name,
                f"{setups[subject]['create_s']:.0f} / {setups[subject]['setup_s']:.0f}",
                f"{r['quiet_s']:.0f}",
                f"{r['rss_mib']:.0f}",
                f"{r['rss_mib'] / peer['rss_mib']:.2f}×",
                f"{r['peak_rss_mib']:.0f}",
                f"{r['idle_cpu_s_per_min']:.2f}",
                f"{r['idle_cpu_s_per_min'] / peer['idle_cpu_s_per_min']:.2f}×",
                f"{r['idle_own_writes']} / {r['idle_writes']}",
                num(r["own_writes_per_resync"]),
                num(r["idle_passes"], ".0f"),
                num(r["passes_per_cpu_s"], ".0f"),
            ]
        )
    headers = [
        "kcm client",
        "subject",
        "setup s (creates / all)",
        "start → quiet s",
        "RSS MiB",
        "÷ t-o",
        "peak RSS MiB",
    ]
    headers += ["idle CPU s/min", "÷ t-o", "idle writes own / all", "own writes / resync"]
    return table([*headers, "passes (idle window)", "passes / CPU s"], rows)
