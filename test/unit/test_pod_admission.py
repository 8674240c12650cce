"""Pod Security of the worker pods (pure builders) and the dry run that asks the namespace about
them (`pod_admission.py`, against a stand-in for the API server)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from jobspecs import job, queue, worker

from controller.clock import FakeClock
from controller.rest.client import RESTClient
from controller.rest.errors import ApiError
from controller.torchrunjob.manifests.common import training_security_context
from controller.torchrunjob.manifests.worker import worker_pod
from controller.torchrunjob.pod_admission import RECHECK, PodAdmission
from controller.torchrunjob.updater import JobUpdater

ALLOWED_CAPABILITIES = {"NET_BIND_SERVICE"}


def restricted_faults(pod: dict[str, Any]) -> list[str]:
    """What Pod Security's `restricted` level (its container checks) finds wrong with a pod spec."""
    spec = pod["spec"]
    pod_sc = spec.get("securityContext") or {}
    faults = []
    for c in [*spec.get("initContainers", ()), *spec["containers"]]:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            faults.append(f"{name}: allowPrivilegeEscalation")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or ()) or set(caps.get("add") or ()) - ALLOWED_CAPABILITIES:
            faults.append(f"{name}: capabilities")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            faults.append(f"{name}: runAsNonRoot")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            faults.append(f"{name}: runAsUser=0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            faults.append(f"{name}: seccompProfile")
    return faults


def test_a_worker_pod_of_a_default_queue_is_restricted_every_container_of_it() -> None:
    """torchrun, `prepare`, the code copy (an upload job), the reporter; checkpoints mounted."""
    q = queue(storage={"checkpoints": {"enabled": True}})
    pod = worker_pod(worker(job(workspace={"source": "upload"}), q))
    names = {c["name"] for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]}
    assert {"torchrun", "prepare", "workspace", "progress-reporter"} <= names
    assert restricted_faults(pod) == []
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}


def test_stack_dumps_make_the_sidecar_the_one_container_restricted_refuses() -> None:
    pod = worker_pod(worker(job(), queue(debug={"stackDumps": True})))
    assert restricted_faults(pod) == [
        "progress-reporter: capabilities",
        "progress-reporter: runAsNonRoot",
        "progress-reporter: runAsUser=0",
    ]


@pytest.mark.parametrize(
    ("own", "want"),
    [
        ({}, {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}),
        (
            {"runAsUser": 1000, "capabilities": {"add": ["NET_BIND_SERVICE"]}},
            {
                "runAsUser": 1000,
                "runAsNonRoot": True,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            },
        ),
        # the queue's own words win, field by field
        (
            {"allowPrivilegeEscalation": True, "capabilities": {"drop": []}},
            {"runAsNonRoot": True, "allowPrivilegeEscalation": True, "capabilities": {"drop": []}},
        ),
        # the API refuses allowPrivilegeEscalation: false beside these: left out
        (
            {"runAsNonRoot": False, "privileged": True},
            {"runAsNonRoot": False, "privileged": True, "capabilities": {"drop": ["ALL"]}},
        ),
        (
            {"capabilities": {"add": ["SYS_ADMIN"]}},
            {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}},
        ),
    ],
)
def test_restricted_defaults_lie_under_the_queues_security_context(
    own: dict[str, Any], want: dict[str, Any]
) -> None:
    q = queue(securityContext=own) if own else queue()
    assert training_security_context(q) == want
    m = worker(job(workspace={"source": "upload"}), q)
    spec = m["spec"]["template"]["spec"]
    for c in (
        spec["containers"][0],
        *(i for i in spec["initContainers"] if i["name"] != "progress-reporter"),
    ):
        assert c["securityContext"] == want, c["name"]


def test_the_dry_run_pod_is_the_jobs_pod_for_index_0() -> None:
    m = worker(job(), queue(podAnnotations={"a": "b"}))
    pod = worker_pod(m)
    assert pod["metadata"]["name"] == "j-0" and pod["metadata"]["namespace"] == "ns"
    assert pod["spec"]["hostname"] == "j-0" and pod["spec"]["subdomain"] == "j"
    assert pod["metadata"]["annotations"] == {"a": "b", "batch.kubernetes.io/job-completion-index": "0"}
    assert pod["metadata"]["labels"]["torchrun.ai/role"] == "worker"
    assert pod["spec"]["containers"] == m["spec"]["template"]["spec"]["containers"]


class DryRuns:
    """The API server's answers to dry-run creates, one per request (an ApiError is raised)."""

    def __init__(self, *answers: ApiError | None) -> None:
        self.answers = list(answers)
        self.sent: list[dict[str, Any]] = []

    def request(self, verb: str, method: str, path: str, resource: str = "", **kw: Any) -> dict[str, Any]:
        assert (verb, method, path, resource) == (
            "create/dryrun",
            "POST",
            "/api/v1/namespaces/ns/pods",
            "pods",
        )
        assert kw["params"]["dryRun"] == "All"
        self.sent.append(kw["body"])
        answer = self.answers.pop(0)
        if answer is not None:
            raise answer
        return dict(kw["body"])


FORBIDDEN = ApiError(
    403,
    {
        "reason": "Forbidden",
        "message": 'pods "j-0" is forbidden: violates PodSecurity "restricted:latest": runAsUser=0 '
        '(container "progress-reporter" must not set runAsUser=0)',
    },
)


def check(api: DryRuns, clock: FakeClock, updater: JobUpdater, q: Any, **kw: Any) -> Any:
    admission = PodAdmission(cast(RESTClient, api), clock)
    return admission.check(job(), q, worker(job(), q, **kw), updater)


def test_a_refusal_names_the_queues_stack_dumps_and_quotes_the_namespaces_policy() -> None:
    api, clock, updater = DryRuns(FORBIDDEN), FakeClock(), JobUpdater("ns/j", "u-1")
    q = queue(debug={"stackDumps": True})
    refusal = check(api, clock, updater, q)
    assert refusal is not None
    assert "namespace ns refuses the worker pods" in refusal.message
    assert 'violates PodSecurity "restricted:latest"' in refusal.message
    assert "TorchrunQueue q sets debug.stackDumps: true" in refusal.message
    assert api.sent[0]["metadata"]["name"] == "j-0"


def test_a_refusal_without_stack_dumps_points_at_the_queues_security_context() -> None:
    api, clock, updater = DryRuns(FORBIDDEN), FakeClock(), JobUpdater("ns/j", "u-1")
    refusal = check(api, clock, updater, queue(securityContext={"runAsNonRoot": False, "runAsUser": 0}))
    assert refusal is not None and "spec.securityContext" in refusal.message
    assert "debug.stackDumps" not in refusal.message


def test_a_webhooks_refusal_is_quoted_without_blaming_the_security_context() -> None:
    denied = ApiError(
        403,
        {"reason": "Forbidden", "message": 'admission webhook "validate.kyverno.svc" denied the request: no'},
    )
    refusal = check(DryRuns(denied), FakeClock(), JobUpdater("ns/j", "u-1"), queue())
    assert refusal is not None and 'admission webhook "validate.kyverno.svc" denied' in refusal.message
    assert "securityContext" not in refusal.message


def test_an_admitted_pod_is_asked_about_once_per_attempt() -> None:
    api, clock, updater = DryRuns(None, None), FakeClock(), JobUpdater("ns/j", "u-1")
    q = queue()
    assert check(api, clock, updater, q) is None
    clock.step(10 * RECHECK)
    assert check(api, clock, updater, q) is None
    assert len(api.sent) == 1
    assert check(api, clock, updater, q, restart=1) is None  # the next attempt asks again
    assert len(api.sent) == 2


def test_a_refused_pod_is_asked_about_again_after_recheck_or_once_the_pod_changes() -> None:
    api, clock, updater = DryRuns(FORBIDDEN, FORBIDDEN, None), FakeClock(), JobUpdater("ns/j", "u-1")
    stack = queue(debug={"stackDumps": True})
    first = check(api, clock, updater, stack)
    admission = PodAdmission(cast(RESTClient, api), clock)
    assert first is not None and admission.retry_in(first) == RECHECK
    clock.step(RECHECK / 2)
    assert check(api, clock, updater, stack) == first and len(api.sent) == 1
    assert admission.retry_in(first) == RECHECK / 2
    clock.step(RECHECK / 2)
    assert check(api, clock, updater, stack) is not None and len(api.sent) == 2
    assert check(api, clock, updater, queue()) is None and len(api.sent) == 3  # the queue changed


@pytest.mark.parametrize(
    "answer",
    [
        ApiError(400, {"reason": "BadRequest", "message": "admission webhook x does not support dry run"}),
        ApiError(409, {"reason": "AlreadyExists", "message": 'pods "j-0" already exists'}),
        ApiError(403, {"reason": "Forbidden", "message": 'pods "j-0" is forbidden: exceeded quota: q'}),
    ],
)
def test_an_answer_that_proves_nothing_lets_the_job_go_on(answer: ApiError) -> None:
    api, clock, updater = DryRuns(answer), FakeClock(), JobUpdater("ns/j", "u-1")
    assert check(api, clock, updater, queue()) is None


def test_a_transient_error_is_raised_and_not_remembered() -> None:
    busy = ApiError(500, {"reason": "InternalError", "message": "etcdserver: timeout"})
    api, clock, updater = DryRuns(busy, None), FakeClock(), JobUpdater("ns/j", "u-1")
    with pytest.raises(ApiError):
        check(api, clock, updater, queue())
    assert check(api, clock, updater, queue()) is None and len(api.sent) == 2
