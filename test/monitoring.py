"""What the shipped monitoring (config/prometheus, config/grafana) reads, for the tests that check
it: every series the controller and the reporter sidecar export (with their label names), the
metrics and labels a PromQL expression names, the alert rules of the PrometheusRule, the
dashboard's queries, the scrape configs the ServiceMonitor and PodMonitor stand for, and Debian's
`prometheus` and `promtool` as hack/testbed/build-prometheus.sh leaves them.

The scrape configs are derived as the Prometheus Operator derives them (a ServiceMonitor's port
name resolved through the Service it selects and the Deployment's container port; a PodMonitor's
through the worker pod's container ports), except that each target is the address a test's own
process listens on: the test bed's controller and reporter run on loopback, not in pods. A
monitor's port name, path or selector that stops matching what the controller and its pods
serve fails the derivation or the scrape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.metrics import MetricWrapperBase
from testbed import REPO, cache_dir, pins

from controller.autoscaler.metrics import AutoscalerMetrics
from controller.cache import Indexer, Lister
from controller.metrics.registry import ControllerMetrics
from controller.metrics.workqueue import PrometheusWorkqueueMetricsProvider
from controller.progress.endpoint import report_counter
from controller.progress.record import Record
from controller.progress.sidecar.server import Latest, metric_lines
from controller.torchrunjob.metrics import JobsCollector, ProgressCollector

CONFIG = REPO / "config"
RULES = CONFIG / "prometheus" / "rules.yaml"
DASHBOARD = CONFIG / "grafana" / "torchrun-controller.json"
BUILD_PROMETHEUS = "hack/testbed/build-prometheus.sh"

# labels Prometheus adds to every scraped series (ServiceMonitor targets), and histograms' `le`
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container", "le"}
PROMETHEUS_SERIES = {"up": set[str]()}  # written by Prometheus itself for every target
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "topk", "bottomk", "rate", "irate", "increase", "delta",
    "deriv", "absent", "min_over_time", "max_over_time", "histogram_quantile", "clamp_min",
    "clamp_max", "abs", "time", "by", "without", "on", "ignoring", "and", "or", "unless",
}  # fmt: skip
GROUPING = r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)"


def _family_series(registry: CollectorRegistry, labels: Mapping[str, set[str]]) -> dict[str, set[str]]:
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}
    series: dict[str, set[str]] = {}
    for family in registry.collect():
        known = labels.get(family.name, set()).union(*(s.labels for s in family.samples)) - {"le"}
        for s in family.samples:
            series[s.name] = known
        for suffix in suffixes.get(family.type, ("",)):
            series[family.name + suffix] = known
    return series


def controller_series() -> dict[str, set[str]]:
    """Every series name the controller's /metrics can expose, with its label names: what
    controller.cmd.main registers (process collectors, ControllerMetrics, the workqueue and
    autoscaler metrics, the progress reports' counter, the cache-backed job counts and, with
    --progress-job-metrics, the jobs' progress), filled in a fresh CollectorRegistry."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    owners: list[Any] = [
        ControllerMetrics(registry),
        PrometheusWorkqueueMetricsProvider(registry),
        AutoscalerMetrics(registry),
        {"reports": report_counter(registry)},
    ]
    jobs = Indexer()  # one cached job, so the collectors' families have a sample to show labels
    status = {
        "progress": {"percent": 5, "eta": "2026-01-02T12:00:00Z"},
        "restarts": 1,
        "restartsByReason": {"Stalled": 1},
        "conditions": [{"type": "Running", "status": "True", "reason": "AllWorkersRunning"}],
        "checkpoint": {"newest": {"name": "step-10", "time": "2026-01-02T11:00:00Z"}},
        "goodput": {"seconds": {"good": 90.0, "stalls": 10.0}},
        "workspaceBytes": 4000,
    }
    spec = {"jobQueue": "q", "failurePolicy": {"maxRestarts": 3}}
    jobs.add({"metadata": {"namespace": "ns", "name": "j"}, "spec": spec, "status": status})
    registry.register(JobsCollector(Lister(jobs)))
    registry.register(ProgressCollector(Lister(jobs)))
    labels: dict[str, set[str]] = {}
    for owner in owners:
        for metric in (owner if isinstance(owner, dict) else vars(owner)).values():
            if isinstance(metric, MetricWrapperBase):
                for family in metric.describe():
                    # a labelled metric has no samples before its first use: read its label names
                    labels[family.name] = set(metric._labelnames)
    return {**PROMETHEUS_SERIES, **scraped(_family_series(registry, labels))}


def scraped(series: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The series as Prometheus stores them: a label the target has too (a ServiceMonitor
    target's namespace, job, pod, ...) is kept as exported_<label> (honorLabels is not set)."""
    targets = TARGET_LABELS - {"le"}
    return {
        name: {f"exported_{lb}" if lb in targets else lb for lb in labels} for name, labels in series.items()
    }


def reporter_series() -> dict[str, set[str]]:
    """Every series a reporter sidecar's /metrics (the PodMonitor's target) can expose."""
    latest = Latest()
    full = Record(step=1, total_steps=2, epoch=0.5, samples_per_second=3.0, rank=0, metrics={"loss": 1.0})
    latest.set(full, 0.0)
    series: dict[str, set[str]] = dict(PROMETHEUS_SERIES)
    for line in metric_lines(latest, "0", 1.0):
        if not line.startswith("#"):
            name, _, rest = line.partition("{")
            series[name] = set(re.findall(r'(\w+)="', rest.partition("}")[0]))
    return scraped(series)


def metrics_and_labels(expr: str) -> tuple[set[str], dict[str, set[str]], set[str]]:
    """(bare identifiers, labels matched per selector's metric, labels in by/without/on/ignoring)."""
    selectors: dict[str, set[str]] = {}
    for name, body in re.findall(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}", expr):
        selectors.setdefault(name, set()).update(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", body))
    grouping = {label.strip() for clause in re.findall(GROUPING, expr) for label in clause.split(",")}
    stripped = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]|' + GROUPING, " ", expr)
    stripped = re.sub(r"\b\d+(\.\d+)?\b", " ", stripped)
    return set(re.findall(r"[a-zA-Z_:][\w:]*", stripped)) - PROMQL_WORDS, selectors, grouping


def unknown_names(expr: str, series: Mapping[str, set[str]]) -> list[str]:
    """What `expr` names that `series` does not have: metrics, and labels of a selector or a
    grouping clause (the labels Prometheus adds to every target allowed)."""
    names, selectors, grouping = metrics_and_labels(expr)
    problems = [f"no metric {n}" for n in sorted(names - set(series))]
    for name, used in selectors.items():
        missing = used - series.get(name, set()) - TARGET_LABELS
        problems += [f"{name} has no label {label}" for label in sorted(missing)]
    available = set().union(*(series.get(n, set()) for n in names)) | TARGET_LABELS
    problems += [f"no label {label} to group by" for label in sorted(grouping - available)]
    return problems


# -- the shipped objects -------------------------------------------------------------------------


def config_objects(*parts: str) -> Iterator[dict[str, Any]]:
    """Every object of the YAML files in config/<parts> (kustomization.yaml aside)."""
    for path in sorted(CONFIG.joinpath(*parts).glob("*.yaml")):
        if path.name != "kustomization.yaml":
            yield from (doc for doc in yaml.safe_load_all(path.read_text()) if doc)


def config_object(kind: str, *parts: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [
        d for d in config_objects(*parts) if d["kind"] == kind and name in (None, d["metadata"]["name"])
    ]
    return doc


def rule_groups() -> list[dict[str, Any]]:
    """The PrometheusRule's groups: a plain rules file's `groups`."""
    rule = yaml.safe_load(RULES.read_text())
    assert rule["kind"] == "PrometheusRule" and rule["apiVersion"] == "monitoring.coreos.com/v1"
    return list(rule["spec"]["groups"])


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in rule_groups() for r in group["rules"] if "alert" in r}


def dashboard_panels() -> Iterator[dict[str, Any]]:
    """Every panel of the dashboard, those inside rows included."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in panels:
            yield p
            yield from walk(p.get("panels") or [])

    yield from walk(json.loads(DASHBOARD.read_text())["panels"])


def dashboard_variables() -> list[dict[str, Any]]:
    return list(json.loads(DASHBOARD.read_text())["templating"]["list"])


# -- Prometheus ----------------------------------------------------------------------------------


def prometheus_tool(name: str) -> Path:
    """`prometheus` or `promtool` of hack/testbed/build-prometheus.sh; fails (never skips) saying
    how to get it when it is not there."""
    path = cache_dir() / "bin" / f"prometheus-{pins()['PROMETHEUS_DEBIAN_VERSION']}" / name
    if not path.is_file():
        pytest.fail(f"Debian's {name} is not there: run {BUILD_PROMETHEUS} (expects {path})")
    return path


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels is derived here: {selector}"
    return dict(selector.get("matchLabels") or {}).items() <= labels.items()


def service_monitor_scrape(
    monitor: Mapping[str, Any],
    services: list[Mapping[str, Any]],
    pod: Mapping[str, Any],
    addresses: Mapping[str, str],
    interval: str,
) -> list[dict[str, Any]]:
    """The scrape configs a ServiceMonitor stands for: each Service it selects (labels, and its
    namespaceSelector) whose pods include `pod`; each endpoint's port, a port name of that
    Service, whose targetPort names a container port of `pod` (a Deployment's template) —
    scraped at `addresses[container port name]`, with the labels the Operator gives its targets
    (job = the Service's name)."""
    spec = monitor["spec"]
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [monitor["metadata"]["namespace"]]
    where = monitor["metadata"]["namespace"]
    pod_labels = pod["metadata"].get("labels") or {}
    containers = pod["spec"]["containers"]
    configs = []
    for service in services:
        meta = service["metadata"]
        if meta["namespace"] not in namespaces or not _matches(spec["selector"], meta.get("labels") or {}):
            continue
        if not dict(service["spec"]["selector"]).items() <= pod_labels.items():
            continue
        for endpoint in spec["endpoints"]:
            (port,) = [p for p in service["spec"]["ports"] if p.get("name") == endpoint["port"]] or [None]
            assert port is not None, f"{meta['name']} has no port named {endpoint['port']}"
            (container,) = [c for c in containers if port["targetPort"] in {p["name"] for p in c["ports"]}]
            target = {
                "job": meta["name"],
                "namespace": meta["namespace"],
                "service": meta["name"],
                "endpoint": endpoint["port"],
                "pod": pod["metadata"]["name"],
                "container": container["name"],
            }
            configs.append(
                {
                    "job_name": f"serviceMonitor/{where}/{monitor['metadata']['name']}",
                    "scrape_interval": interval,
                    "metrics_path": endpoint.get("path", "/metrics"),
                    "scheme": endpoint.get("scheme", "http"),
                    "static_configs": [{"targets": [addresses[port["targetPort"]]], "labels": target}],
                }
            )
    assert configs, f"ServiceMonitor {monitor['metadata']['name']} selects no Service of the pod"
    return configs


def pod_monitor_scrape(
    monitor: Mapping[str, Any], pods: list[tuple[Mapping[str, Any], str]], port_of: str, interval: str
) -> dict[str, Any]:
    """The scrape config a PodMonitor stands for: `pod_monitor_job` with the targets
    `pod_monitor_targets` finds among `pods`."""
    return {
        **pod_monitor_job(monitor, interval),
        "static_configs": pod_monitor_targets(monitor, pods, port_of),
    }


def pod_monitor_job(monitor: Mapping[str, Any], interval: str) -> dict[str, Any]:
    """A PodMonitor's scrape config without its targets: its path and scheme."""
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    meta = monitor["metadata"]
    return {
        "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}",
        "scrape_interval": interval,
        "metrics_path": endpoint.get("path", "/metrics"),
        "scheme": endpoint.get("scheme", "http"),
    }


def pod_monitor_targets(
    monitor: Mapping[str, Any], pods: list[tuple[Mapping[str, Any], str]], port_of: str
) -> list[dict[str, Any]]:
    """The static targets of a PodMonitor: each of `pods` (a pod as the API server has it, and
    the address its container port `port_of` is served on here) that its selector and
    namespaceSelector pick, when its podMetricsEndpoint's port names a container port of the pod
    (job = <namespace>/<name>, as the Operator names it)."""
    spec = monitor["spec"]
    meta = monitor["metadata"]
    (endpoint,) = spec["podMetricsEndpoints"]
    namespaces = spec["namespaceSelector"]
    statics = []
    for pod, address in pods:
        pm = pod["metadata"]
        if not (namespaces.get("any") or pm["namespace"] in namespaces.get("matchNames", [])):
            continue
        if not _matches(spec["selector"], pm.get("labels") or {}):
            continue
        # the reporter is a native sidecar (an init container): Kubernetes SD lists their ports too
        every = [*pod["spec"].get("initContainers", ()), *pod["spec"]["containers"]]
        named = {p.get("name"): c for c in every for p in c.get("ports") or []}
        assert endpoint["port"] in named, f"pod {pm['name']} has no container port {endpoint['port']}"
        assert endpoint["port"] == port_of, (
            f"the PodMonitor scrapes {endpoint['port']}, served here: {port_of}"
        )
        labels = {
            "namespace": pm["namespace"],
            "pod": pm["name"],
            "container": named[endpoint["port"]]["name"],
        }
        statics.append(
            {"targets": [address], "labels": {"job": f"{meta['namespace']}/{meta['name']}", **labels}}
        )
    assert statics, f"PodMonitor {meta['name']} selects none of the pods"
    return statics
