"""The shipped alerts (config/prometheus/rules.yaml) as Prometheus runs them: Debian's `promtool`
checks the PrometheusRule's groups and runs test/unit/alert_rules_test.yaml against them, where
every alert fires on what it is for and clears afterwards; every rule names only series the
controller or the reporter sidecar export, under the job names the ServiceMonitor and PodMonitor
give them; and the scrape configs the monitors stand for (test/monitoring.py) follow the shipped
Service, Deployment and worker pod, or fail.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from jobspecs import job, queue
from monitoring import (
    alerts,
    config_object,
    controller_series,
    pod_monitor_scrape,
    prometheus_tool,
    reporter_series,
    rule_groups,
    service_monitor_scrape,
    unknown_names,
)

from controller.torchrunjob.manifests.progress import ReporterSettings, reporter_container

RULE_TESTS = Path(__file__).with_name("alert_rules_test.yaml")
CONTROLLER_JOB = 'job="torchrun-controller-metrics"'
SIDECAR_JOB = 'job="torchrun-system/torchrun-training"'


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(prometheus_tool("promtool")), *args], check=False, capture_output=True, text=True, timeout=120
    )


def test_promtool_fires_and_clears_every_alert(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    checked = promtool("check", "rules", str(tmp_path / "rules.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    cases = yaml.safe_load(RULE_TESTS.read_text())
    cases["rule_files"] = ["rules.yaml"]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(cases))
    ran = promtool("test", "rules", str(tmp_path / "tests.yaml"))
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_each_alert_has_a_case_where_it_fires_and_a_later_one_where_it_cleared() -> None:
    seen: dict[str, list[tuple[str, bool]]] = {}
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            seen.setdefault(check["alertname"], []).append((check["eval_time"], bool(check["exp_alerts"])))

    def minutes(t: str) -> int:
        assert t.endswith("m"), t
        return int(t[:-1])

    for name in alerts():
        checks = sorted(seen.get(name, []), key=lambda c: minutes(c[0]))
        fired = [minutes(t) for t, firing in checks if firing]
        assert fired, f"{name} never fires in {RULE_TESTS.name}"
        assert any(not firing and minutes(t) > fired[0] for t, firing in checks), (
            f"{name} never clears after firing in {RULE_TESTS.name}"
        )
    assert set(seen) <= set(alerts()), f"cases for alerts that do not exist: {set(seen) - set(alerts())}"


def test_every_rule_names_only_series_that_are_exported() -> None:
    controller, sidecar = controller_series(), reporter_series()
    for group in rule_groups():
        for rule in group["rules"]:
            expr = rule["expr"]
            # the controller's series and the sidecars' are told apart by the job the monitors give
            series = sidecar if SIDECAR_JOB in expr or "torchrun_training_" in expr else controller
            if SIDECAR_JOB not in expr:
                assert CONTROLLER_JOB in expr or "torchrun_training_" in expr, (
                    f"{rule['alert']}: select the controller's series by {CONTROLLER_JOB}"
                )
            assert not unknown_names(expr, series), f"{rule['alert']}: {unknown_names(expr, series)}"
            assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
            assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]


def test_a_renamed_metric_or_label_is_caught() -> None:
    series = controller_series()
    assert unknown_names(f"workqueue_depth{{{CONTROLLER_JOB}}} > 1", series) == []
    assert unknown_names(f"workqueue_length{{{CONTROLLER_JOB}}} > 1", series) == [
        "no metric workqueue_length"
    ]
    assert unknown_names('sum by (queue) (workqueue_depth{name="x"})', series) == [
        "no label queue to group by"
    ]
    assert unknown_names('workqueue_depth{resource="x"}', series) == ["workqueue_depth has no label resource"]


def test_the_rules_select_the_jobs_the_monitors_give() -> None:
    """The Operator names a ServiceMonitor's targets' job after the Service, a PodMonitor's
    <namespace>/<name>: the rules' job matchers must be those names."""
    service = config_object("Service", "manager", name="torchrun-controller-metrics")
    pods = config_object("PodMonitor", "prometheus")["metadata"]
    assert f'job="{service["metadata"]["name"]}"' == CONTROLLER_JOB
    assert f'job="{pods["namespace"]}/{pods["name"]}"' == SIDECAR_JOB
    assert (
        "rules.yaml"
        in yaml.safe_load((RULE_TESTS.parents[2] / "config/prometheus/kustomization.yaml").read_text())[
            "resources"
        ]
    )


# -- the scrape configs the monitors stand for ----------------------------------------------------


def shipped() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    deployment = config_object("Deployment", "manager")
    pod = {"metadata": {"name": "torchrun-controller-0", **deployment["spec"]["template"]["metadata"]}}
    pod["spec"] = deployment["spec"]["template"]["spec"]
    services = [config_object("Service", "manager", name="torchrun-controller-metrics")]
    return config_object("ServiceMonitor", "prometheus"), services, pod


def test_the_servicemonitor_becomes_a_target_of_the_metrics_port() -> None:
    monitor, services, pod = shipped()
    (config,) = service_monitor_scrape(monitor, services, pod, {"metrics": "127.0.0.1:1"}, "1s")
    assert config["metrics_path"] == "/metrics" and config["scheme"] == "http"
    (static,) = config["static_configs"]
    assert static["targets"] == ["127.0.0.1:1"]
    assert static["labels"]["job"] == "torchrun-controller-metrics"
    assert static["labels"]["namespace"] == "torchrun-system"


@pytest.mark.parametrize(
    "change",
    ["the monitor's port", "the Service's port name", "the monitor's selector", "the container port name"],
)
def test_a_servicemonitor_that_no_longer_matches_fails_the_derivation(change: str) -> None:
    monitor, services, pod = map(copy.deepcopy, shipped())
    if change == "the monitor's port":
        monitor["spec"]["endpoints"][0]["port"] = "http-metrics"
    elif change == "the Service's port name":
        services[0]["spec"]["ports"][0]["name"] = "http-metrics"
    elif change == "the monitor's selector":
        monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "manager"
    else:
        (container,) = pod["spec"]["containers"]
        for port in container["ports"]:
            port["name"] = "http" if port["name"] == "metrics" else port["name"]
    with pytest.raises((AssertionError, ValueError)):
        service_monitor_scrape(monitor, services, pod, {"metrics": "127.0.0.1:1"}, "1s")


def worker_pod() -> dict[str, Any]:
    sidecar = reporter_container(job(), queue(), "img", ReporterSettings())
    meta = {"name": "j-worker-0", "namespace": "team-a", "labels": {"torchrun.ai/role": "worker"}}
    return {"metadata": meta, "spec": {"initContainers": [sidecar], "containers": [{"name": "worker"}]}}


def test_the_podmonitor_becomes_a_target_of_each_workers_reporter() -> None:
    monitor = config_object("PodMonitor", "prometheus")
    config = pod_monitor_scrape(monitor, [(worker_pod(), "127.0.0.1:2")], "progress", "1s")
    (static,) = config["static_configs"]
    assert static["targets"] == ["127.0.0.1:2"] and config["metrics_path"] == "/metrics"
    assert static["labels"]["job"] == "torchrun-system/torchrun-training"
    assert static["labels"]["pod"] == "j-worker-0"


def test_a_podmonitor_that_no_longer_matches_fails_the_derivation() -> None:
    monitor = copy.deepcopy(config_object("PodMonitor", "prometheus"))
    monitor["spec"]["podMetricsEndpoints"][0]["port"] = "metrics"
    with pytest.raises(AssertionError):
        pod_monitor_scrape(monitor, [(worker_pod(), "127.0.0.1:2")], "progress", "1s")
    monitor = copy.deepcopy(config_object("PodMonitor", "prometheus"))
    monitor["spec"]["selector"]["matchLabels"] = {"torchrun.ai/role": "trainer"}
    with pytest.raises(AssertionError):
        pod_monitor_scrape(monitor, [(worker_pod(), "127.0.0.1:2")], "progress", "1s")
