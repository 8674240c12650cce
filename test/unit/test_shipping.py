"""What ships (SPEC §9), checked by reading it: the Dockerfile and its build context, the wheel's
contents, the Deployment against the CLI it runs, the Service/ServiceMonitor wiring, and a Grafana
dashboard that only queries metrics the controller registers.

No Docker engine runs here, so the Dockerfile is checked statically; the manifests' acceptance by
a real kube-apiserver is test/integration/test_config.py.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import setuptools
import yaml
from jobspecs import job, queue
from monitoring import TARGET_LABELS, config_object, controller_series, metrics_and_labels, reporter_series

from controller.api.labels import LEADER_LABEL
from controller.cmd.main import SHUTDOWN_TIMEOUT
from controller.cmd.options import parse
from controller.torchrunjob.manifests.progress import ReporterSettings, reporter_container

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config"
TOOLS = REPO / "controller" / "tools"
DASHBOARD = CONFIG / "grafana" / "torchrun-controller.json"
SETUP = configparser.ConfigParser()
SETUP.read(REPO / "setup.cfg")


# -- Dockerfile ------------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for inst in dockerfile():
        if inst[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(inst)
    return result


def build_args() -> dict[str, str]:
    """Global ARG defaults (those before the first FROM)."""
    args: dict[str, str] = {}
    for word, rest in dockerfile():
        if word == "FROM":
            break
        if word == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args[key] = value
    return args


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), text)


def test_the_image_is_multi_stage_on_python_3_11_slim() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "build the wheel in one stage, ship it from another"
    args = build_args()
    for stage in all_stages:
        image = expand(stage[0][1].split()[0], args)
        assert image == "python:3.11-slim" or image.startswith("python:3.11-slim@sha256:"), image
    final = all_stages[-1]
    assert len(final[0][1].split()) == 1, "the final stage is unnamed, so `docker build` targets it"
    build = all_stages[0]
    assert any(w == "RUN" and "pip wheel" in r for w, r in build), "the build stage makes wheels"


def test_the_final_stage_installs_the_wheels_offline_into_a_venv_on_path() -> None:
    final = stages()[-1]
    run = " ".join(r for w, r in final if w == "RUN")
    assert "-m venv" in run and "--no-index" in run and "--find-links" in run
    assert "torchrun-controller" in run
    assert not any(w in ("COPY", "ADD") and "controller" in r.split() for w, r in final), (
        "the final stage ships the installed wheel, not the source tree"
    )
    env = " ".join(r for w, r in final if w == "ENV")
    venv = re.search(r"VIRTUAL_ENV=(\S+)", env)
    assert venv, "the final stage names its virtualenv"
    path = re.search(r"(?<!\w)PATH=(\S+)", env)
    # the venv's python comes first: the sync pods run `python -m controller.sync` from this image
    assert path and path[1].split(":")[0] == f"{venv[1]}/bin", path


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    users = [r for w, r in stages()[-1] if w == "USER"]
    assert users, "the final stage sets USER"
    uid, _, gid = users[-1].partition(":")
    # numeric, so the kubelet can check runAsNonRoot without an /etc/passwd lookup
    assert uid.isdigit() and int(uid) == 65532, users[-1]
    assert not gid or (gid.isdigit() and int(gid) != 0), users[-1]


def test_the_entrypoint_is_the_console_script() -> None:
    entrypoints = [r for w, r in stages()[-1] if w == "ENTRYPOINT"]
    assert entrypoints, "the final stage sets ENTRYPOINT"
    # exec form: the controller is PID 1 and gets SIGTERM itself (it drains on it)
    assert json.loads(entrypoints[-1]) == ["torchrun-controller"]
    scripts = SETUP.get("options.entry_points", "console_scripts")
    assert re.search(r"^\s*torchrun-controller\s*=", scripts, re.MULTILINE), scripts
    assert not [r for w, r in stages()[-1] if w == "CMD"], "flags come from the Deployment's args"


def test_nothing_is_fetched_with_add() -> None:
    adds = [r for w, r in dockerfile() if w == "ADD"]
    # COPY only: ADD also fetches URLs (unpinned, unverified inputs) and unpacks archives
    assert not adds, adds


def dockerignored(path: str) -> bool:
    """Docker's rule, near enough for our patterns: the last pattern matching the path or one of
    its parent directories decides; `!` re-includes."""
    ignored = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for line in (REPO / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes):
            ignored = not negate
    return ignored


def test_the_build_context_holds_what_the_build_copies_and_little_else() -> None:
    copies = [r for w, r in stages()[0] if w == "COPY"]
    sources = [src for line in copies for src in shlex.split(line)[:-1] if not src.startswith("--")]
    assert sources
    for src in sources:
        assert (REPO / src).exists(), src
        assert not dockerignored(src), f"{src} is copied but .dockerignore leaves it out"
    for py in (REPO / "controller").rglob("*.py"):
        assert not dockerignored(py.relative_to(REPO).as_posix()), py
    # setup.cfg reads the long description from a file: it must be in the context too
    readme = SETUP.get("metadata", "long_description").removeprefix("file:").strip()
    assert readme in sources
    for excluded in ("test/conftest.py", "hack/test.sh", ".git/HEAD", "controller/__pycache__/x.pyc"):
        assert dockerignored(excluded), excluded


def test_the_wheel_ships_every_module() -> None:
    """`packages = find:` only finds directories with an __init__.py; anything else would be
    missing from the wheel and the image would fail at import."""
    found = set(setuptools.find_packages(where=str(REPO), include=["controller", "controller.*"]))
    dirs = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "controller").rglob("*.py")
        if "__pycache__" not in p.parts and TOOLS not in p.parents  # tools/ is package data
    }
    assert dirs - found == set(), "these directories need an __init__.py to ship in the wheel"


def test_the_wheel_ships_every_file_of_the_worker_tools() -> None:
    """`controller/tools/` is copied into every worker pod (`sync prepare`): not a package, so
    only `package_data` ships it; each of its files must match one of those patterns."""
    patterns = SETUP["options.package_data"]["controller"].replace(",", " ").split()
    files = [p for p in TOOLS.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert any(p.name == "launch" for p in files)
    for path in files:
        relative = path.relative_to(REPO / "controller").as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), relative


# -- Deployment, Service, ServiceMonitor ---------------------------------------------------------------


@pytest.fixture
def deployment() -> dict[str, Any]:
    return config_object("Deployment", "manager")


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(c)


def test_the_deployment_args_are_valid_flags_with_leader_election(deployment: dict[str, Any]) -> None:
    c = container(deployment)
    assert "command" not in c, "the image's entrypoint is the controller"
    opts = parse(c["args"])
    assert opts.leader_elect and deployment["spec"]["replicas"] >= 2
    # the Lease goes in the pod's own namespace (read from the service account); no flag needed
    assert opts.leader_elect_namespace == ""
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(opts.metrics_addr.rpartition(":")[2]) == ports["metrics"] == 8080
    assert int(opts.health_addr.rpartition(":")[2]) == ports["health"] == 8081
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_the_deployment_is_locked_down_and_sized(deployment: dict[str, Any]) -> None:
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    uid = next(r for w, r in stages()[-1] if w == "USER").partition(":")[0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert set(c["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and "memory" in c["resources"]["limits"]
    # SIGTERM → drain for up to SHUTDOWN_TIMEOUT, then release the Lease: leave room for both
    assert pod["terminationGracePeriodSeconds"] >= max(30, SHUTDOWN_TIMEOUT + 5)
    assert pod["serviceAccountName"] == config_object("ServiceAccount", "rbac")["metadata"]["name"]


def test_the_network_policy_admits_only_workers_to_the_progress_port(deployment: dict[str, Any]) -> None:
    policy = config_object("NetworkPolicy", "manager")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"] for p in container(deployment)["ports"]}
    by_port = {p["port"]: rule.get("from") for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert set(by_port) == ports  # every port the controller serves is named, nothing else
    assert by_port["progress"] == [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"torchrun.ai/role": "worker"}}}
    ]
    assert by_port["metrics"] is None and by_port["health"] is None  # Prometheus, the kubelet


def test_the_image_tag_and_label_are_the_package_version(deployment: dict[str, Any]) -> None:
    version = SETUP.get("metadata", "version")
    assert container(deployment)["image"] == f"ghcr.io/torchrun-ai/torchrun-controller:{version}"
    args = [r for w, r in stages()[-1] if w == "ARG"]
    assert f"VERSION={version}" in args, args


def test_the_metrics_service_and_servicemonitor_select_each_other(deployment: dict[str, Any]) -> None:
    service = config_object("Service", "manager", name="torchrun-controller-metrics")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in container(deployment)["ports"]}
    monitor = config_object("ServiceMonitor", "prometheus")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"


def test_the_progress_endpoint_is_served_and_its_url_names_its_service(deployment: dict[str, Any]) -> None:
    opts = parse(container(deployment)["args"])
    service = config_object("Service", "manager", name="torchrun-controller-progress")
    # the leader alone: the pod's labels plus the one the leading replica puts on its own pod
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == {**pod_labels, LEADER_LABEL: "true"}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container(deployment)["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    ports = {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}
    (port,) = service["spec"]["ports"]
    assert int(opts.progress_bind_address.rpartition(":")[2]) == ports[port["targetPort"]] == port["port"]
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert opts.progress_url == f"https://{host}:{port['port']}/v1/progress"


def test_the_podmonitor_scrapes_every_workers_reporter() -> None:
    monitor = config_object("PodMonitor", "prometheus")
    assert monitor["spec"]["selector"]["matchLabels"] == {"torchrun.ai/role": "worker"}
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    sidecar = reporter_container(job(), queue(), "img", ReporterSettings())
    assert endpoint["port"] in {p["name"] for p in sidecar["ports"]} and endpoint["path"] == "/metrics"


# -- Grafana dashboard ---------------------------------------------------------------------------


def dashboard_queries() -> list[tuple[str, bool]]:
    """(PromQL, is a panel's) for every panel target and every query variable."""
    board = json.loads(DASHBOARD.read_text())

    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in panels:
            yield p
            yield from walk(p.get("panels") or [])

    exprs = [(t["expr"], True) for p in walk(board["panels"]) for t in p.get("targets") or []]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query)
            assert match, f"variable {var['name']}: {query}"
            exprs.append((f"sum by ({match[2]}) ({match[1]})", False))
    return exprs


def test_the_dashboard_queries_only_metrics_the_controller_registers() -> None:
    series = {**reporter_series(), **controller_series()}  # the PodMonitor's and the ServiceMonitor's
    queries = dashboard_queries()
    assert len(queries) >= 20
    for expr, in_panel in queries:
        names, selectors, grouping = metrics_and_labels(expr)
        unknown = names - set(series)
        assert not unknown, f"{expr}: not a metric the controller exposes: {unknown}"
        if in_panel:  # so a second controller in the same Prometheus never mixes in
            assert names == set(selectors), f"{expr}: select every metric with {{job=~...}}"
        for name, used in selectors.items():
            assert used <= series[name] | TARGET_LABELS, f"{expr}: {name} has no label {used - series[name]}"
        available = set().union(*(series[n] for n in names)) | TARGET_LABELS
        assert grouping <= available, f"{expr}: no such labels: {grouping - available}"


def test_the_dashboard_covers_the_controllers_key_metrics() -> None:
    used = set().union(*(metrics_and_labels(e)[0] for e, _ in dashboard_queries()))
    for name in (
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket",
        "workqueue_retries_total",
        "rest_client_requests_total",
        "rest_client_request_duration_seconds_bucket",
        "controller_reconcile_total",
        "controller_reconcile_duration_seconds_bucket",
        "torchrun_jobs",
        "torchrun_job_submit_to_running_seconds_bucket",
        "leader_election_master_status",
        "torchrun_gc_deletions_total",
        "informer_relists_total",
    ):
        assert name in used, name


def test_the_dashboard_is_importable() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "torchrun-controller" and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
    kustomization = yaml.safe_load((CONFIG / "grafana" / "kustomization.yaml").read_text())
    assert kustomization["configMapGenerator"][0]["files"] == [DASHBOARD.name]
