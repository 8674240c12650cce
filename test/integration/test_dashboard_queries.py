"""The shipped Grafana dashboard, run: Debian's Prometheus scrapes the controller program (leader
election, the progress endpoint, --progress-job-metrics) and a real reporter sidecar process,
with scrape configs derived from config/prometheus's ServiceMonitor and PodMonitor
(test/monitoring.py; the processes are test/integration/scraping.py's), while a scripted job
runs: its code is uploaded (as kubectl torchrun's upload, through the sync pod's exec), it
starts, its rank reports five steps and then falls silent (heartbeats only), is Stalled
and restarted once (onStall Restart), and the new attempt's rank reports step 40 of 100. Then
every panel query of the dashboard — its variables resolved as Grafana resolves them, against the
same Prometheus — returns what that run implies.

Rates are checked as moved or not (the script implies a count, Prometheus' rate() extrapolates
it); latencies, CPU and memory only for presence (see PRESENCE_ONLY). A panel with no
expectation here fails `test_every_panel_has_an_expectation`.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from jobs import make_job, queue_manifest
from monitoring import (
    config_object,
    dashboard_panels,
    dashboard_variables,
    pod_monitor_job,
    pod_monitor_targets,
    service_monitor_scrape,
)
from scraping import Prometheus, Result, free_port, pod_token, prometheus, reporter
from testbed import Cluster, condition, controller_program, wait_until
from uploads import archive, upload, wait_running

from controller.rest import RESTClient, load_config

SCRAPE = "1s"
IDENTITY = "torchrun-controller-0"  # the leader's identity: the pod name its target stands for
STEPS_BEFORE_STALL = 5
STEP, TOTAL = 40, 100
SUBMIT_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)  # ControllerMetrics.submit_to_running
WORKSPACE = {"train.py": b"#" * 1000, "data/weights.bin": b"\0" * 3000}  # the upload: 4000 bytes of files
WORKSPACE_BYTES = sum(len(data) for data in WORKSPACE.values())


class Run(NamedTuple):
    """What the scripted run did, as the checks need it."""

    namespace: str
    queue: str
    job: str
    submit_to_running: float  # seconds, at the API's one-second resolution
    prometheus: Prometheus
    last_write: float  # monotonic time of the last progress line written


def worker_pod(cluster: Cluster, ns: str, job: str, not_uids: frozenset[str] = frozenset()) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        selector = f"torchrun-job-name={job},torchrun.ai/role=worker"
        for pod in cluster.get("pods", "-n", ns, "-l", selector)["items"]:
            live = pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            if live and pod["metadata"]["uid"] not in not_uids:
                return dict(pod)
        return None

    found: dict[str, Any] = wait_until(running, 60, message=f"{job}'s worker running")
    return found


def seconds_between(earlier: str, later: str) -> float:
    parse = lambda t: datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731
    return (parse(later) - parse(earlier)).total_seconds()


def scrape_configs(metrics_port: int, workdir: Path) -> list[dict[str, Any]]:
    """The ServiceMonitor's scrape config, its target the controller program's metrics port
    standing for the Deployment's pod, and the PodMonitor's, its targets in the file
    `Prometheus.set_file_targets` writes (the worker pod changes with each attempt)."""
    deployment = config_object("Deployment", "manager")
    controller_pod = {"metadata": {"name": IDENTITY, **deployment["spec"]["template"]["metadata"]}}
    controller_pod["spec"] = deployment["spec"]["template"]["spec"]
    services = [config_object("Service", "manager", name="torchrun-controller-metrics")]
    monitor = config_object("ServiceMonitor", "prometheus")
    scrape = service_monitor_scrape(
        monitor, services, controller_pod, {"metrics": f"127.0.0.1:{metrics_port}"}, SCRAPE
    )
    pods = pod_monitor_job(config_object("PodMonitor", "prometheus"), SCRAPE)
    pods["file_sd_configs"] = [{"files": [str(workdir / "file-targets.json")], "refresh_interval": SCRAPE}]
    return [*scrape, pods]


def submit_to_running(cluster: Cluster, ns: str, job: str) -> float:
    """Seconds from the job's creation to its Running=True (the API's one-second resolution)."""

    def running() -> dict[str, Any] | None:
        obj = cluster.get("torchrunjob", job, "-n", ns)
        found = condition(obj, "Running")
        return obj if found and found["status"] == "True" else None

    obj = wait_until(running, 60, message="Running")
    since = (condition(obj, "Running") or {})["lastTransitionTime"]
    return seconds_between(obj["metadata"]["creationTimestamp"], since)


@pytest.fixture(scope="module")
def run(cluster: Cluster, crds: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    ns, queue, job = f"t-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:6]}", "train"
    workdir = tmp_path_factory.mktemp("dashboard")
    cluster.create_namespace(ns)
    cluster.apply(queue_manifest(queue, "run", nodeResources={"gpus": 0, "cpus": "20m"}))
    rest = RESTClient(load_config(str(cluster.kubeconfig)))
    metrics_port, progress_port = free_port(), free_port()
    flags = (
        "--leader-elect",
        f"--leader-elect-namespace={ns}",
        f"--leader-elect-identity={IDENTITY}",
        f"--metrics-addr=127.0.0.1:{metrics_port}",
        f"--progress-bind-address=127.0.0.1:{progress_port}",
        "--progress-period=1",
        "--progress-job-metrics",
    )
    progress_url = f"https://127.0.0.1:{progress_port}/v1/progress"
    with contextlib.ExitStack() as stack:
        stack.enter_context(controller_program(cluster.kubeconfig, ns, workdir / "controller.log", *flags))
        wait_until(
            lambda: (
                cluster.get("lease", "torchrun-controller", "-n", ns)["spec"].get("holderIdentity")
                == IDENTITY
            ),
            60,
            message="the controller to lead",
        )
        prom = stack.enter_context(prometheus(workdir, scrape_configs(metrics_port, workdir), SCRAPE))
        # scraped before the job exists, so its first observations show as increases
        wait_until(
            lambda: prom.query("sum(up)") == {(): 1.0},
            30,
            message="the controller scraped (the ServiceMonitor's derived port and path reach /metrics)",
        )
        make_job(
            cluster, ns, queue, job, numNodes=1, workspace={"source": "upload"},
            progress={"stallTimeoutSeconds": 10, "onStall": "Restart"}, failurePolicy={"maxRestarts": 3},
        )  # fmt: skip
        # the code comes as kubectl torchrun's upload: WORKSPACE_BYTES of files
        wait_running(cluster, ns, f"{job}-sync-0")
        sent = upload(cluster, ns, f"{job}-sync-0", archive(WORKSPACE), 0)
        assert sent.returncode == 0, sent.stderr.decode()
        first = worker_pod(cluster, ns, job)
        submit = submit_to_running(cluster, ns, job)
        # attempt 0: five steps, then silence but for the heartbeats: Stalled, restarted once
        with reporter(first, progress_url, pod_token(rest, first), workdir) as rank0:
            for step in range(1, STEPS_BEFORE_STALL + 1):
                rank0.write(step, TOTAL)
            wait_until(
                lambda: (cluster.get("torchrunjob", job, "-n", ns).get("status") or {}).get("restarts") == 1,
                90,
                message="the stalled job restarted",
            )
        # attempt 1: its rank reports step STEP, and the PodMonitor's target is its sidecar
        second = worker_pod(cluster, ns, job, frozenset({first["metadata"]["uid"]}))
        rank0 = stack.enter_context(reporter(second, progress_url, pod_token(rest, second), workdir))
        for step in range(1, STEP + 1):
            rank0.write(step, TOTAL)
        last_write = time.monotonic()
        pod_monitor = config_object("PodMonitor", "prometheus")
        prom.set_file_targets(pod_monitor_targets(pod_monitor, [(second, rank0.address)], "progress"))

        def settled() -> bool:
            percent = prom.query(f'torchrun_job_progress_percent{{exported_job="{job}"}}')
            steps = prom.query("torchrun_training_step")
            return list(percent.values()) == [STEP * 100 // TOTAL] and list(steps.values()) == [STEP]

        wait_until(settled, 60, interval=0.5, message="Prometheus to have scraped step 40 from both")
        yield Run(ns, queue, job, submit, prom, last_write)
    cluster.kubectl("delete", "torchrunqueue", queue, "--wait=false")
    cluster.delete_namespace(ns)


# -- the dashboard's queries, as Grafana sends them ----------------------------------------------


def resolved_variables(prom: Prometheus) -> dict[str, str]:
    """Each query variable's values (label_values, as Grafana asks Prometheus), every one
    selected, in the regex Grafana substitutes for a multi-value variable."""
    values: dict[str, str] = {}
    for var in dashboard_variables():
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query)
        assert match, query
        found = prom.label_values(match[2], substitute(match[1], values, "1m"))
        assert found, f"variable {var['name']}: {query} has no values"
        values[var["name"]] = found[0] if len(found) == 1 else "(" + "|".join(map(re.escape, found)) + ")"
    return values


def substitute(expr: str, variables: dict[str, str], rate_interval: str) -> str:
    """`expr` as Grafana sends it: the variables' values, and the rate interval and the
    dashboard's time range (`$__range`) both `rate_interval` (the whole run)."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("$__range", rate_interval)
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr, expr
    return expr


def panel_results(run: Run) -> dict[str, list[Result]]:
    """Every panel's targets evaluated now, by panel title; rates over the whole run."""
    variables = resolved_variables(run.prometheus)
    window = f"{int(time.monotonic() - run.prometheus.started) + 5}s"
    results: dict[str, list[Result]] = {}
    for title, panel in titled_panels():
        assert title not in results, f"two panels named {title}"
        results[title] = [
            run.prometheus.query(substitute(t["expr"], variables, window)) for t in panel["targets"]
        ]
    return results


def titled_panels() -> Iterator[tuple[str, dict[str, Any]]]:
    """("<row> / <title>", panel) for every panel but the rows (titles repeat across rows)."""
    row = ""
    for panel in dashboard_panels():
        if panel["type"] == "row":
            row = panel["title"]
        else:
            yield f"{row} / {panel['title']}", panel


def by(result: Result, *labels: str) -> dict[tuple[str, ...], float]:
    out = {}
    for key, value in result.items():
        named = dict(key)
        out[tuple(named.get(label, "") for label in labels)] = value
    return out


def one(results: list[Result]) -> float:
    ((only,),) = [list(r.values()) for r in results]
    return only


def all_zero(results: list[Result]) -> bool:
    return all(v == 0 for r in results for v in r.values())


def quantile_in_bucket(q: float, seconds: float) -> set[float]:
    """histogram_quantile(q) of one observation of `seconds` (±1 s: the API's resolution), as
    Prometheus interpolates it inside the bucket (linear from its lower bound)."""
    answers = set()
    for t in (seconds - 1, seconds, seconds + 1):
        upper = next(b for b in SUBMIT_BUCKETS if t <= b)
        lower = max((b for b in SUBMIT_BUCKETS if b < upper), default=0)
        answers.add(round(lower + (upper - lower) * q, 6))
    return answers


# The panels checked only for a series: their values are timings or the process's own usage,
# which no script implies.
PRESENCE_ONLY = {
    "Reconcile / Reconcile duration p99",
    "Workqueues / Queue latency p99",
    "Workqueues / Work duration p99",
    "API server client / Request latency p99",
    "API server client / Client-side throttling p99",
    "Process / Memory",
    "Process / CPU",
    "Process / Open file descriptors",
}


def check_panels(run: Run, cluster: Cluster) -> dict[str, Callable[[list[Result]], Any]]:
    """What each panel must show after the scripted run (a check raises, or returns falsy)."""
    pods = cluster.get("pods", "-n", run.namespace)["items"]
    jobs = cluster.get("jobs.batch", "-n", run.namespace)["items"]

    def cached(results: list[Result]) -> bool:
        counts = by(results[0], "resource")
        assert counts[("torchrunjobs.torchrun.ai",)] == 1, counts
        assert counts[("pods",)] == len(pods), (counts, [p["metadata"]["name"] for p in pods])
        assert counts[("jobs.batch",)] == len(jobs), counts
        return True

    def submit_to_running(results: list[Result]) -> bool:
        for q, result in zip((0.5, 0.9, 0.99), results, strict=True):
            (value,) = result.values()
            expected = quantile_in_bucket(q, run.submit_to_running)
            assert round(value, 6) in expected, (q, value, run.submit_to_running, expected)
        return True

    def moved(*keys: tuple[str, ...], labels: tuple[str, ...]) -> Callable[[list[Result]], bool]:
        def check(results: list[Result]) -> bool:
            got = by(results[0], *labels)
            assert all(got.get(k, 0) > 0 for k in keys), got
            return True

        return check

    def ledger() -> dict[str, float]:
        job = cluster.get("torchrunjob", run.job, "-n", run.namespace)
        return {k: float(v) for k, v in job["status"]["goodput"]["seconds"].items()}

    def goodput_ratio(results: list[Result]) -> bool:
        """The job's status.goodput as a fraction. The script writes each attempt's steps in one
        burst, so next to no wall time advanced training: near 0, and the ledger's own value
        (which grows between the scrape and this read: 5 points of slack)."""
        seconds = ledger()
        truth = seconds.get("good", 0) / sum(seconds.values())
        (value,) = by(results[0], "exported_job").values()
        assert value < 0.1 and abs(value - truth) <= 0.05, (value, seconds)
        return True

    def lost_time(results: list[Result]) -> bool:
        """Every cause but good, as status.goodput counts it. The silence from the first
        attempt's step 5 to the second attempt's first step — the stall timeout (10 s), then the
        restart — is the ledger's "restarts" (stall time within an attempt that went on would be
        "stalls")."""
        by_cause = by(results[0], "exported_job", "cause").items()
        got = {cause: v for (job, cause), v in by_cause if job == run.job}
        seconds = ledger()
        assert set(got) == set(seconds) - {"good"}, (got, seconds)
        assert got["restarts"] >= 10, got
        assert all(abs(got[c] - seconds[c]) <= 5 for c in got), (got, seconds)
        return True

    def time_to_finish(results: list[Result]) -> bool:
        """The job's status.progress.eta less now (5 s of slack for the scrape), or no series
        while the status has none."""
        job = cluster.get("torchrunjob", run.job, "-n", run.namespace)
        eta = (job["status"].get("progress") or {}).get("eta")
        if eta is None:
            assert results == [{}], results
            return True
        (value,) = by(results[0], "exported_job").values()
        truth = datetime.fromisoformat(eta.replace("Z", "+00:00")).timestamp() - time.time()
        assert abs(value - truth) <= 5, (value, truth, eta)
        return True

    def present(results: list[Result]) -> bool:
        # a verb with no request in the window is NaN (a gap in Grafana): one real value each
        return all(any(not math.isnan(v) for v in r.values()) for r in results)

    def at_most(bound: float) -> Callable[[list[Result]], bool]:
        return lambda results: all(v <= bound for r in results for v in r.values())

    checks: dict[str, Callable[[list[Result]], Any]] = {
        "Overview / Leaders": lambda r: one(r) == 1,
        "Overview / Replicas up": lambda r: one(r) == 1,
        "Overview / Jobs running": lambda r: one(r) == 1,
        "Overview / Jobs pending": lambda r: r == [{}],  # none pending: the sum of no series, "No data"
        "Overview / Jobs by phase": lambda r: by(r[0], "phase") == {("Running",): 1},
        "Overview / Jobs by queue": lambda r: by(r[0], "queue") == {(run.queue,): 1},
        "Overview / Submit to running": submit_to_running,
        "Training / Progress by job": lambda r: (
            by(r[0], "exported_namespace", "exported_job") == {(run.namespace, run.job): STEP * 100 // TOTAL}
        ),
        "Training / Training step by rank": lambda r: (
            by(r[0], "pod", "rank") == {(run_pod(cluster, run), "0"): STEP}
        ),
        "Training / Seconds since the step changed": lambda r: all(
            0 <= v <= time.monotonic() - run.last_write + 2 for v in r[0].values()
        ),
        "Training / Progress reports by result": moved(("200",), labels=("result",)),
        "Training / Goodput by job": goodput_ratio,
        "Training / Lost time by cause": lost_time,
        "Training / Restarts and their cap": lambda r: (
            [by(t, "exported_job") for t in r] == [{(run.job,): 1}, {(run.job,): 3}]  # maxRestarts 3
        ),
        # the stall the script caused, seen while it lasted (the job progresses again now)
        "Training / Not progressing in range": lambda r: (
            by(r[0], "exported_job", "reason") == {(run.job, "Stalled"): 1}
        ),
        "Training / Newest checkpoint age": lambda r: r == [{}],  # the script saves no checkpoint
        "Training / Restarts by reason": lambda r: (
            by(r[0], "exported_job", "reason") == {(run.job, "Stalled"): 1}
        ),
        "Training / Time to finish by job": time_to_finish,
        "Training / Workspace size by job": lambda r: (
            by(r[0], "exported_job") == {(run.job,): WORKSPACE_BYTES}
        ),
        # a running job's reconciles end in a requeue: its progress is looked at every period
        "Reconcile / Reconciles by result": moved(
            ("torchrunjob", "requeue"), ("torchrunqueue", "success"), labels=("controller", "result")
        ),
        "Reconcile / Reconcile errors": all_zero,
        "Reconcile / Busy workers": at_most(4),  # --threadiness
        "Workqueues / Depth": at_most(1),  # drained, but for the job's progress requeue
        "Workqueues / Adds": moved(("torchrunjob",), ("torchrunqueue",), labels=("name",)),
        # client-go's retries count every AddAfter: the progress period's requeues
        "Workqueues / Retries": moved(("torchrunjob",), labels=("name",)),
        "Workqueues / Stuck work": at_most(5),
        "API server client / Requests by verb and code": moved(
            ("create", "201"), ("get", "200"), ("update/status", "200"), labels=("verb", "code")
        ),
        "API server client / Retries": all_zero,
        "Informers and garbage collection / Relists": all_zero,
        "Informers and garbage collection / Watch events": moved(
            ("torchrunjobs.torchrun.ai", "MODIFIED"),
            ("pods", "ADDED"),
            ("jobs.batch", "ADDED"),
            labels=("resource", "type"),
        ),
        "Informers and garbage collection / Cached objects": cached,
        "Informers and garbage collection / GC deletions": all_zero,
    }
    checks.update({title: present for title in PRESENCE_ONLY})
    return checks


def run_pod(cluster: Cluster, run: Run) -> str:
    return str(worker_pod(cluster, run.namespace, run.job)["metadata"]["name"])


def test_every_panel_has_an_expectation(run: Run, cluster: Cluster) -> None:
    titles = {title for title, _ in titled_panels()}
    assert titles == set(check_panels(run, cluster)), titles ^ set(check_panels(run, cluster))


def test_the_targets_are_up_and_the_variables_select_them(run: Run) -> None:
    assert run.prometheus.targets_up() == {
        "torchrun-controller-metrics": "up",
        "torchrun-system/torchrun-training": "up",
    }
    assert resolved_variables(run.prometheus) == {
        "namespace": "torchrun-system",
        "job": "torchrun-controller-metrics",
        "job_namespace": run.namespace,
    }


def test_every_panel_shows_what_the_scripted_run_implies(run: Run, cluster: Cluster) -> None:
    results = panel_results(run)
    checks = check_panels(run, cluster)
    wrong = {}
    for title, result in results.items():
        try:
            ok, why = bool(checks[title](result)), ""
        except (AssertionError, LookupError) as exc:
            ok, why = False, repr(exc)
        if not ok:
            wrong[title] = f"{result} {why}"
    assert not wrong, json.dumps(wrong, indent=1)


def test_a_renamed_metric_leaves_its_panel_empty(run: Run) -> None:
    """What the check above relies on: a query naming a series nobody exports answers nothing."""
    assert run.prometheus.query('sum(torchrun_jobs_total{phase="Running"})') == {}
    assert run.prometheus.query('sum(torchrun_jobs{phase="Running"})') == {(): 1.0}
