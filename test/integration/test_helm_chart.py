"""charts/torchrun-controller with the real `helm` (hack/testbed/build-helm.sh, HELM_VERSION).

The chart renders config/'s own manifests (its templates read them through the link
charts/torchrun-controller/config), so the two installs cannot drift: with its defaults it
renders exactly what `kubectl kustomize config/` does (and config/prometheus, config/grafana with
monitoring and the dashboard switched on), once Helm's three bookkeeping labels are taken off.
The values change only what they name; bad values are refused by values.schema.json naming the
field; the chart installs into the test bed's control plane (Pod Security "restricted" enforced
on its namespace) and `helm uninstall` takes back everything it made. The controller the chart
installs runs as pods and trains on the real node in test/e2e/test_realnode_progress_service.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from testbed import CHART, REPO, Cluster, helm_binary, kubectl_binary

RELEASE = "torchrun-controller"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding")
PSA_LABELS = [f"pod-security.kubernetes.io/{mode}=restricted" for mode in ("enforce", "warn", "audit")]
Doc = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary()


def run_helm(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def render(helm: Path, *values: str, namespace: str = "torchrun-system") -> list[Doc]:
    """`helm template` of the chart: its objects (CRDs not included, as `kubectl apply -k`)."""
    out = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", namespace, *values).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kustomize(*dirs: str) -> list[Doc]:
    docs: list[Doc] = []
    for d in dirs:
        out = subprocess.run(
            [str(kubectl_binary()), "kustomize", str(REPO / d)], capture_output=True, text=True, check=True
        ).stdout
        docs += [x for x in yaml.safe_load_all(out) if x]
    return docs


def without_helm_labels(docs: list[Doc]) -> list[Doc]:
    for doc in docs:
        labels = doc["metadata"].get("labels") or {}
        for key in HELM_LABELS:
            assert key in labels, f"{doc['kind']}/{doc['metadata']['name']} lacks Helm's label {key}"
            del labels[key]
    return docs


def by_identity(docs: list[Doc]) -> dict[tuple[str, str, str], Doc]:
    keyed = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}
    assert len(keyed) == len(docs), "two objects share a kind, namespace and name"
    return keyed


def only(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    (doc,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def test_the_chart_lints_clean(helm: Path) -> None:
    run_helm(helm, "lint", "--strict", str(CHART))
    run_helm(
        helm, "lint", "--strict", str(CHART), "--set", "dashboard.enabled=true",
        "--set", "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true",
        "--set", "monitoring.prometheusRule.enabled=true",
    )  # fmt: skip


def test_the_default_render_is_config_exactly(helm: Path) -> None:
    """Every object `kubectl apply -k config/` applies, field for field, and nothing else; but the
    Namespace, which exists before a release does (Helm keeps the release's record in it)."""
    chart = by_identity(without_helm_labels(render(helm)))
    config = by_identity(kustomize("config"))
    assert sorted(chart) == sorted(k for k in config if k[0] != "Namespace")
    for key, doc in chart.items():
        assert doc == config[key], f"{key} differs from config/"


def test_monitoring_and_the_dashboard_render_config_prometheus_and_grafana(helm: Path) -> None:
    switches = (
        "dashboard.enabled=true,monitoring.serviceMonitor.enabled=true,"
        "monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true"
    )
    chart = by_identity(without_helm_labels(render(helm, "--set", switches)))
    config = by_identity(kustomize("config", "config/prometheus", "config/grafana"))
    assert sorted(chart) == sorted(k for k in config if k[0] != "Namespace")
    for key, doc in chart.items():
        assert doc == config[key], f"{key} differs from config/"
    rules = only(list(chart.values()), "PrometheusRule")
    summaries = [r["annotations"]["summary"] for g in rules["spec"]["groups"] for r in g["rules"]]
    assert any("{{ $labels.namespace }}" in s for s in summaries), "the alerts' own templates are kept"


def test_another_namespace_leaves_no_trace_of_torchrun_system(helm: Path) -> None:
    """Every place config/ names its namespace follows the release's: the binding subjects, the
    progress URL the workers get, the ServiceMonitor's namespace and the PodMonitor's job label
    in the alerts."""
    switches = (
        "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true,"
        "monitoring.prometheusRule.enabled=true"
    )
    docs = render(helm, "--set", switches, namespace="ml-platform")
    assert "torchrun-system" not in yaml.safe_dump_all(docs)
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == "ml-platform", doc["metadata"]
        for subject in doc.get("subjects") or ():
            assert subject["namespace"] == "ml-platform"
    args = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--progress-url=https://torchrun-controller-progress.ml-platform.svc:9443/v1/progress" in args
    assert only(docs, "ServiceMonitor")["spec"]["namespaceSelector"]["matchNames"] == ["ml-platform"]
    exprs = [r["expr"] for g in only(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    assert any('job="ml-platform/torchrun-training"' in e for e in exprs)


def test_values_change_only_what_they_name(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"repository": "registry.example/ml/torchrun-controller", "tag": "9.9.9"},
                "replicas": 3,
                "flags": {"threadiness": 8, "progress-period": 5, "leader-elect": False, "dry": True},
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                "nodeSelector": {"pool": "system"},
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                "podAnnotations": {"example.com/team": "ml"},
                "networkPolicy": {"enabled": False},
            }
        )
    )
    docs = without_helm_labels(render(helm, "-f", str(values)))
    config = kustomize("config")
    assert "NetworkPolicy" not in {d["kind"] for d in docs}
    got, shipped = only(docs, "Deployment"), only(config, "Deployment")
    pod, c = got["spec"]["template"]["spec"], got["spec"]["template"]["spec"]["containers"][0]
    assert got["spec"]["replicas"] == 3
    assert c["image"] == "registry.example/ml/torchrun-controller:9.9.9"
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}}
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    assert got["spec"]["template"]["metadata"]["annotations"] == {"example.com/team": "ml"}
    expected = [
        a for a in shipped["spec"]["template"]["spec"]["containers"][0]["args"] if a != "--leader-elect"
    ]
    expected = ["--threadiness=8" if a.startswith("--threadiness=") else a for a in expected]
    assert c["args"] == [*expected, "--dry", "--progress-period=5"]
    # the rest of the Deployment, and every other object, is config/'s
    for field in ("args", "image", "resources"):
        c.pop(field)
        shipped["spec"]["template"]["spec"]["containers"][0].pop(field)
    for obj in (got, shipped):
        obj["spec"].pop("replicas")
        obj["spec"]["template"]["metadata"].pop("annotations", None)
        obj["spec"]["template"]["spec"].pop("nodeSelector")
        obj["spec"]["template"]["spec"].pop("tolerations", None)
    assert got == shipped
    rest = by_identity([d for d in docs if d["kind"] != "Deployment"])
    assert rest == by_identity(
        [d for d in config if d["kind"] not in ("Deployment", "Namespace", "NetworkPolicy")]
    )


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (["--set", "replicas=two"], "replicas"),
        (["--set", "replica=3"], "replica"),
        (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
        (["--set", "flags.Threadiness=8"], "Threadiness"),
        (["--set", "monitoring.serviceMonitor=true"], "serviceMonitor"),
        (["--set-json", 'flags={"threadiness":[8]}'], "threadiness"),
    ],
)
def test_bad_values_are_refused_naming_the_field(helm: Path, values: list[str], named: str) -> None:
    proc = run_helm(helm, "template", RELEASE, str(CHART), *values, check=False)
    assert proc.returncode != 0, f"helm template {values} rendered:\n{proc.stdout[:500]}"
    assert named in proc.stderr, proc.stderr
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr


@pytest.fixture
def release_namespace(cluster: Cluster) -> Iterator[str]:
    """The namespace as docs/install.md makes it for the chart: Pod Security "restricted"
    enforced, as config/manager/namespace.yaml's."""
    name = "helm-torchrun"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, *PSA_LABELS)
    yield name
    cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


def test_it_installs_into_the_control_plane_and_uninstalls_without_a_trace(
    helm: Path, cluster: Cluster, release_namespace: str
) -> None:
    """The API server accepts every object, the Deployment's pod is admitted under Pod Security
    "restricted", and `helm uninstall` removes every object the release made; the CRDs, already
    installed by the test bed, are Helm's to skip and stay."""
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", release_namespace]
    installed = run_helm(helm, "install", RELEASE, str(CHART), *kube, "--set", "replicas=1")
    assert "STATUS: deployed" in installed.stdout, installed.stdout
    rendered = render(helm, "--set", "replicas=1", namespace=release_namespace)
    for doc in rendered:
        where = [] if doc["kind"] in CLUSTER_SCOPED else ["-n", release_namespace]
        got = cluster.get(doc["kind"].lower(), doc["metadata"]["name"], *where)
        assert got["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert got["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    # the test bed's kube-controller-manager runs no Deployments without the real node (where
    # test_realnode_progress_service.py runs the chart's replicas): the API server admits the pod
    # template as a pod, Pod Security "restricted" included
    template = only(rendered, "Deployment")["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": "admitted"}}
    pod["spec"] = template["spec"]
    cluster.kubectl("create", "--dry-run=server", "-n", release_namespace, "-f", "-", input=json.dumps(pod))
    pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    refused = cluster.kubectl(
        "create", "--dry-run=server", "-n", release_namespace, "-f", "-", input=json.dumps(pod), check=False
    )
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr
    assert "STATUS: deployed" in run_helm(helm, "status", RELEASE, *kube).stdout

    run_helm(helm, "uninstall", RELEASE, *kube, "--wait")
    for doc in rendered:
        where = [] if doc["kind"] in CLUSTER_SCOPED else ["-n", release_namespace]
        gone = cluster.kubectl("get", doc["kind"].lower(), doc["metadata"]["name"], *where, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, f"{doc['kind']} left behind: {gone.stdout}"
    assert cluster.get("crd", "torchrunjobs.torchrun.ai")["metadata"]["name"]
