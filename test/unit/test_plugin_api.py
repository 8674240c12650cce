"""What the plugin sends to the API server and how it words the answers, without a server: a
`Kube` whose one attempt (`send`) records the request and answers from a script.

The plugin speaks through the controller's `RESTClient` (paths from `Resource`, errors as
`rest.errors.ApiError`); these tests pin the requests it makes — the same method, URL and body
the plugin sent before it shared that client — and the one-line messages users read."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s_client

from controller.plugin import main as main_module
from controller.plugin.errors import PluginError
from controller.plugin.kube import Kube, Target
from controller.plugin.logs import print_logs
from controller.plugin.objects import (
    create_job,
    delete_job,
    events_about,
    get_job,
    get_pod,
    get_queue,
    job_pods,
    list_jobs,
    patch_job,
)
from controller.plugin.workspace import wanted_generation, workspace_source
from controller.rest.errors import ApiError
from controller.rest.request import Request

HOST = "https://api.invalid:6443"
JOBS = "/apis/torchrun.ai/v1alpha1/namespaces/ns/torchrunjobs"


class RecordingKube(Kube):
    """Records each request; answers with the next scripted (status, body), else 200 `{}`."""

    def __init__(self, *answers: tuple[int, Any]) -> None:
        cfg = k8s_client.Configuration()
        cfg.host = HOST
        super().__init__(Target(configuration=cfg, namespace="ns"))
        self.answers = list(answers)
        self.sent: list[tuple[Request, bool, float | None]] = []

    def send(self, req: Request, *, stream: bool, read_timeout: float | None) -> urllib3.BaseHTTPResponse:
        self.sent.append((req, stream, read_timeout))
        status, body = self.answers.pop(0) if self.answers else (200, {})
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if status >= 400:
            raise ApiError(status, data, req.verb, req.path)
        if stream:
            return urllib3.HTTPResponse(body=io.BytesIO(data), status=status, preload_content=False)
        return urllib3.HTTPResponse(body=data, status=status)

    def only(self) -> tuple[str, str, Any, str | None]:
        """The one request sent: method, URL, body, content type."""
        assert len(self.sent) == 1
        req = self.sent[0][0]
        return req.method, req.url(HOST), req.body, req.content_type_header()


MANIFEST = {"apiVersion": "torchrun.ai/v1alpha1", "kind": "TorchrunJob", "metadata": {"name": "train"}}
DELETE_OPTIONS = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
MERGE = "application/merge-patch+json"


@pytest.mark.parametrize(
    "call, sent",
    [
        (lambda k: get_job(k, "train"), ("GET", f"{HOST}{JOBS}/train", None, None)),
        (list_jobs, ("GET", f"{HOST}{JOBS}", None, None)),
        (
            lambda k: list_jobs(k, all_namespaces=True),
            ("GET", f"{HOST}/apis/torchrun.ai/v1alpha1/torchrunjobs", None, None),
        ),
        (
            lambda k: create_job(k, MANIFEST),
            ("POST", f"{HOST}{JOBS}?fieldManager=kubectl-torchrun", MANIFEST, "application/json"),
        ),
        (
            lambda k: patch_job(k, "train", {"spec": {"suspend": True}}),
            (
                "PATCH",
                f"{HOST}{JOBS}/train?fieldManager=kubectl-torchrun",
                {"spec": {"suspend": True}},
                MERGE,
            ),
        ),
        (
            lambda k: delete_job(k, "train"),
            ("DELETE", f"{HOST}{JOBS}/train", DELETE_OPTIONS, "application/json"),
        ),
        (
            lambda k: get_queue(k, "q"),
            ("GET", f"{HOST}/apis/torchrun.ai/v1alpha1/torchrunqueues/q", None, None),
        ),
        (lambda k: get_pod(k, "p"), ("GET", f"{HOST}/api/v1/namespaces/ns/pods/p", None, None)),
        (
            lambda k: job_pods(k, "train", "worker"),
            (
                "GET",
                f"{HOST}/api/v1/namespaces/ns/pods?labelSelector=torchrun-job-name%3Dtrain%2Ctorchrun.ai%2Frole%3Dworker",
                None,
                None,
            ),
        ),
        (lambda k: events_about(k, {"train"}), ("GET", f"{HOST}/api/v1/namespaces/ns/events", None, None)),
    ],
)
def test_each_call_is_one_request_to_the_resources_path(call: Any, sent: tuple[Any, ...]) -> None:
    kube = RecordingKube()
    call(kube)
    assert kube.only() == sent
    assert kube.sent[0][0].attempts is None and kube.max_attempts == 1  # never sent twice


def test_logs_stream_with_no_read_timeout() -> None:
    pod = {"metadata": {"name": "train-0", "annotations": {"batch.kubernetes.io/job-completion-index": "0"}}}
    kube = RecordingKube((200, {"items": [pod]}), (200, b"step 1\nstep 2"))
    out: list[str] = []
    print_logs(kube, "train", {0}, prefix=False, previous=False, out=out.append)
    req, stream, read_timeout = kube.sent[1]
    assert req.url(HOST) == f"{HOST}/api/v1/namespaces/ns/pods/train-0/log?container=torchrun"
    assert (stream, read_timeout) == (True, None)
    assert out == ["step 1", "step 2"]


def test_previous_reads_the_log_of_the_ranks_pod_before_its_newest() -> None:
    """Worker pods never restart a container (`restartPolicy: Never`): a rank's previous log is
    its previous pod's, read as that pod's current log."""

    def worker(name: str, created: str) -> dict[str, Any]:
        index = {"batch.kubernetes.io/job-completion-index": "0"}
        return {"metadata": {"name": name, "annotations": index, "creationTimestamp": created}}

    pods = [worker("train-0-new", "2026-01-02T11:05:00Z"), worker("train-0-old", "2026-01-02T11:00:00Z")]
    kube = RecordingKube((200, {"items": pods}), (200, b"CUDA error: out of memory\n"))
    out: list[str] = []
    print_logs(kube, "train", {0}, prefix=False, previous=True, out=out.append)
    req, _, _ = kube.sent[1]
    assert req.url(HOST) == f"{HOST}/api/v1/namespaces/ns/pods/train-0-old/log?container=torchrun"
    assert out == ["CUDA error: out of memory"]

    alone = RecordingKube((200, {"items": pods[:1]}))
    with pytest.raises(PluginError) as none:
        print_logs(alone, "train", {0}, prefix=False, previous=True, out=out.append)
    assert none.value.message.startswith("job train has no previous worker pod for rank 0: ")
    assert len(alone.sent) == 1  # no log request for a pod that is not there


def test_a_missing_job_and_a_taken_name_are_the_plugins_own_lines() -> None:
    with pytest.raises(PluginError) as missing:
        get_job(RecordingKube((404, {"reason": "NotFound", "message": "x"})), "train")
    assert missing.value.message == (
        'job "train" not found in namespace "ns" (kubectl torchrun list shows the jobs)'
    )
    with pytest.raises(PluginError) as taken:
        create_job(RecordingKube((409, {"reason": "AlreadyExists", "message": "x"})), MANIFEST)
    assert taken.value.message == (
        'job "train" already exists in namespace "ns": pick another --name, or kubectl torchrun delete train'
    )
    assert get_pod(RecordingKube((404, {"reason": "NotFound"})), "p") is None


def test_an_error_status_is_one_line_in_the_servers_words(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def forbidden(*_: Any) -> int:
        raise ApiError(
            403, b'{"kind":"Status","reason":"Forbidden","message":"jobs is forbidden"}', "list", "/x"
        )

    monkeypatch.setattr(main_module, "run", forbidden)
    assert main_module.main(["list"]) == 1
    assert capsys.readouterr().err == "error: jobs is forbidden\n"


def job(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "train"}, "spec": {"jobQueue": "q", "command": "c", **spec}}


@pytest.mark.parametrize(
    "spec, source, generation",
    [
        ({}, "upload", 0),
        ({"workspace": {"source": "upload", "generation": 3}}, "upload", 3),
        ({"workspace": {"source": "git", "git": {"url": "https://x/y.git"}, "generation": 2}}, "git", 2),
        ({"workspace": {"source": "none"}}, "none", 0),
        ({"volumes": {"workspace": {"source": "zip"}}}, "upload", 0),  # the seed's spelling
        ({"volumes": {"workspace": {"enabled": False}}}, "none", 0),
        ({"volumes": {"workspace": {}}}, "upload", 0),
    ],
)
def test_the_workspace_is_read_as_the_controller_reads_it(
    spec: dict[str, Any], source: str, generation: int
) -> None:
    assert (workspace_source(job(spec)), wanted_generation(job(spec))) == (source, generation)


def test_a_job_the_api_types_cannot_read_is_one_line() -> None:
    with pytest.raises(PluginError) as exc:
        workspace_source(job({"workspace": {"source": "ftp"}}))
    assert exc.value.message.startswith('job "train" cannot be read by this kubectl-torchrun (')
    assert 'spec.workspace.source: Unsupported value: "ftp"' in exc.value.message
    assert "\n" not in exc.value.message
