"""The plugin without a cluster: argument parsing, kubeconfig resolution, one-line errors, the
exec status channel, log prefixing and what `list`/`status` print. Flag errors in detail:
test_plugin_flags.py; what the plugin sends to the API: test_plugin_api.py."""

from __future__ import annotations

import datetime
import json
import socket
import urllib.parse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from websocket import WebSocketConnectionClosedException

from controller.plugin import logs as logs_module
from controller.plugin import main as main_module
from controller.plugin import upload as upload_module
from controller.plugin.archive import Archive
from controller.plugin.errors import PluginError, api_error_line
from controller.plugin.kube import load_target
from controller.plugin.logs import LogFollower, prefixed, rank_of, selected
from controller.plugin.main import build_parser, main
from controller.plugin.manifest import SubmitSpec, command_text, generate_name, job_manifest, parse_env
from controller.plugin.upload import ExecOutcome, exit_code, failure_line
from controller.plugin.views import age, job_rows, status_text
from controller.plugin.watch import outcome, waiting_for
from controller.rest.errors import ApiError
from controller.sync import protocol

NOW = datetime.datetime(2026, 1, 2, 12, 0, 0, tzinfo=datetime.timezone.utc)


def kubeconfig(path: Path, server: str, context: str = "ctx", namespace: str | None = "team-a") -> Path:
    ctx: dict[str, Any] = {
        "cluster": context,
        "user": context,
        **({"namespace": namespace} if namespace else {}),
    }
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": context, "cluster": {"server": server}}],
                "users": [{"name": context, "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": ctx}],
                "current-context": context,
            }
        )
    )
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- argument parsing ---------------------------------------------------------------------------


def test_submit_needs_a_queue_and_exactly_one_size(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["submit", "--nodes", "1", "x"],
        ["submit", "--queue", "q", "x"],
        ["submit", "--queue", "q", "--nodes", "1", "--gpus", "8", "x"],
        ["submit", "--queue", "q", "--nodes", "0", "x"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --") and err.count("\n") == 1


def test_connection_flags_before_or_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["-n", "ns1", "--context", "c1", "status", "job"])
    after = parser.parse_args(["status", "job", "--namespace", "ns1", "--context", "c1"])
    for args in (before, after):
        assert (args.namespace, args.context, args.name) == ("ns1", "c1", "job")
    assert not hasattr(parser.parse_args(["list"]), "namespace")  # unset: the context decides


def test_command_words_after_double_dash_keep_their_quoting() -> None:
    args = build_parser().parse_args(
        ["submit", "--queue", "q", "--gpus", "8", "--", "python", "t.py", "--msg", "a b"]
    )
    assert command_text(args.command) == "python t.py --msg 'a b'"
    assert command_text(["python train.py --epochs 3"]) == "python train.py --epochs 3"


def test_manifest_carries_queue_size_command_upload_and_env_overrides() -> None:
    spec = SubmitSpec(queue="q", command="python train.py", gpus=16, env=parse_env(["A=1", "B=x=y", "A=2"]))
    manifest = job_manifest(spec, "My Project_2")
    assert manifest["metadata"] == {"generateName": "my-project-2-"}
    assert manifest["spec"] == {
        "jobQueue": "q",
        "command": "python train.py",
        "numGPUs": 16,
        "workspace": {"source": "upload"},
        "overrides": {"env": [{"name": "A", "value": "2"}, {"name": "B", "value": "x=y"}]},
    }
    assert job_manifest(SubmitSpec(queue="q", command="c", nodes=2, name="n"), "d")["metadata"] == {
        "name": "n"
    }


def test_generated_names_are_dns_labels_that_leave_room_for_the_suffix() -> None:
    assert generate_name("9lives") == "job-9lives-"
    assert generate_name("___") == "job-"
    assert len(generate_name("a" * 100)) == 47


def test_bad_env_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["submit", "--queue", "q", "--nodes", "1", "--env", "NOVALUE", "--dry-run", "x"]) == 1
    assert capsys.readouterr().err == "error: --env 'NOVALUE': want NAME=value with NAME a variable name\n"


# --- kubeconfig like kubectl --------------------------------------------------------------------


def test_namespace_from_flag_then_context_then_default(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "a", "https://example.invalid:6443")
    env = {"KUBECONFIG": str(config)}
    assert load_target(None, None, None, env).namespace == "team-a"
    assert load_target(None, None, "mine", env).namespace == "mine"
    plain = kubeconfig(tmp_path / "b", "https://example.invalid:6443", namespace=None)
    assert load_target(str(plain), None, None, {}).namespace == "default"


def test_kubeconfig_lists_several_files_and_skips_missing_ones(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "one", "https://one.invalid:6443", context="one", namespace="ns-one")
    second = kubeconfig(tmp_path / "two", "https://two.invalid:6443", context="two", namespace="ns-two")
    env = {"KUBECONFIG": f"{tmp_path / 'missing'}:{first}:{second}"}
    target = load_target(None, "two", None, env)
    assert (target.namespace, target.configuration.host) == ("ns-two", "https://two.invalid:6443")
    assert load_target(None, None, None, env).namespace == "ns-one"  # the first file's current-context


@pytest.mark.parametrize(
    "argv, env, line",
    [
        (
            ["list"],
            {"KUBECONFIG": "/nonexistent/a:/nonexistent/b"},
            "error: no kubeconfig: KUBECONFIG=/nonexistent/a:/nonexistent/b has no file; "
            "set KUBECONFIG or pass --kubeconfig",
        ),
        (["--kubeconfig", "/nonexistent/x", "list"], {}, "error: kubeconfig /nonexistent/x does not exist"),
    ],
)
def test_no_kubeconfig_is_one_line(
    argv: list[str],
    env: dict[str, str],
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(argv) == 1
    assert capsys.readouterr().err == line + "\n"


def test_unknown_context_and_unreachable_server_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "c", server)))
    assert main(["status", "x", "--context", "nope"]) == 1
    assert capsys.readouterr().err == "error: context nope is not in the kubeconfig\n"
    assert main(["list"]) == 1
    assert capsys.readouterr().err == f"error: cannot reach the API server at {server}: connection refused\n"


def test_a_bug_is_one_line_too(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*_: Any) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(main_module, "run", broken)
    monkeypatch.delenv(main_module.DEBUG_ENV, raising=False)
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert err == "error: internal error: KeyError: 'oops' (set KUBECTL_TORCHRUN_DEBUG=1 for the traceback)\n"


# --- API answers ------------------------------------------------------------------------------------


def test_a_422_quotes_every_field_cause() -> None:
    body = {
        "kind": "Status",
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
        "message": 'TorchrunJob.torchrun.ai "x" is invalid: ...',
        "details": {
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.numNodes",
                    "message": "Invalid value: 0: must be >= 1",
                },
                {"reason": "FieldValueRequired", "field": "spec.jobQueue", "message": "Required value"},
            ]
        },
    }
    assert api_error_line(ApiError(422, json.dumps(body).encode())) == (
        "the API server refused it: spec.numNodes: Invalid value: 0: must be >= 1; "
        "spec.jobQueue: Required value"
    )
    assert api_error_line(ApiError(403, b'{"kind":"Status","reason":"Forbidden","message":"nope"}')) == "nope"
    assert api_error_line(ApiError(502, b"bad gateway\n")) == "bad gateway"
    assert api_error_line(ApiError(503, b"")) == "the API server answered HTTP 503"


def test_exec_exit_code_comes_from_the_status_channel() -> None:
    assert exit_code(b'{"metadata":{},"status":"Success"}') == (0, "")
    failure = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "message": "command terminated with non-zero exit code: 3",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    assert exit_code(json.dumps(failure).encode()) == (3, failure["message"])
    assert exit_code(b'{"status":"Failure","message":"exec: \\"python\\": not found"}') == (
        126,
        'exec: "python": not found',
    )
    assert exit_code(b"") == (None, "")


def test_an_upload_failure_is_the_sync_programs_last_line() -> None:
    outcome_ = ExecOutcome(1, "", "warning: slow\nChecksumMismatch: got abc, want def\n", "exit code 1")
    assert failure_line(outcome_) == "ChecksumMismatch: got abc, want def"
    assert failure_line(ExecOutcome(126, "", "", "not found")) == "not found"


# --- logs, waiting, views -----------------------------------------------------------------------


def pod(name: str, index: str | None, created: str = "2026-01-02T11:00:00Z", **status: Any) -> dict[str, Any]:
    annotations = {} if index is None else {"batch.kubernetes.io/job-completion-index": index}
    meta = {
        "name": name,
        "uid": name,
        "annotations": annotations,
        "creationTimestamp": created,
        "labels": {"torchrun.ai/role": "worker"},
    }
    return {"metadata": meta, "spec": {"nodeName": "gpu-node-0"}, "status": status}


def test_log_lines_are_prefixed_with_the_rank_only_when_ranks_share_the_output() -> None:
    assert prefixed(3, "loss 0.1", prefix=True) == "[rank 3] loss 0.1"
    assert prefixed(None, "x", prefix=True) == "[rank ?] x"
    assert prefixed(3, "loss 0.1", prefix=False) == "loss 0.1"


def test_ranks_come_from_the_completion_index_and_order_the_pods() -> None:
    pods = [pod("b", "1"), pod("a2", "0", "2026-01-02T11:30:00Z"), pod("a1", "0"), pod("x", None)]
    assert rank_of(pods[0]) == 1 and rank_of(pods[3]) is None
    assert [p["metadata"]["name"] for _, p in selected(pods, None)] == ["x", "a1", "a2", "b"]
    assert [p["metadata"]["name"] for _, p in selected(pods, {0})] == ["a1", "a2"]


def job(
    phase: str = "Pending", conditions: list[dict[str, str]] | None = None, **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "namespace": "ns", "creationTimestamp": "2026-01-02T11:00:00Z"},
        "spec": {
            "jobQueue": "q",
            "numNodes": 2,
            "command": "python train.py",
            "workspace": {"source": "upload"},
        },
        "status": {"phase": phase, "conditions": conditions or [], **status},
    }


def test_waiting_for_reads_the_first_condition_that_is_not_true() -> None:
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok"}
    unbound = {
        "type": "WorkspaceReady",
        "status": "False",
        "reason": "ClaimNotBound",
        "message": "pvc train-workspace is Pending",
    }
    assert waiting_for(job()) == "Admitted: not reported by the controller yet"
    assert (
        waiting_for(job(conditions=[admitted, unbound]))
        == "WorkspaceReady=False ClaimNotBound: pvc train-workspace is Pending"
    )


def test_outcome_of_a_finished_job() -> None:
    failed = {"type": "Failed", "status": "True", "reason": "WorkersFailed", "message": "rank 1 exited 1"}
    assert outcome(job("Running")) is None
    assert outcome(job("Succeeded")) == (0, "job train succeeded")
    assert outcome(job("Failed", [failed])) == (1, "job train failed: WorkersFailed: rank 1 exited 1")


def test_list_and_status_read_like_kubectl() -> None:
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "queue q"}
    running = job(
        "Running", [admitted], nodes=2, gpus=16, restarts=1, workspaceGeneration=1, workspaceSha256="f" * 64
    )
    assert job_rows([running], NOW).splitlines() == [
        "NAME   QUEUE  NODES  GPUS  PHASE    RESTARTS  PROGRESS  GOODPUT  AGE",
        "train  q      2      16    Running  1         -         -        60m",
    ]
    pods = [
        pod(
            "train-0-abc",
            "0",
            phase="Running",
            containerStatuses=[{"state": {"running": {}}, "restartCount": 0}],
        )
    ]
    event = {
        "type": "Normal",
        "reason": "Created",
        "message": "created Job train",
        "involvedObject": {"name": "train"},
        "lastTimestamp": "2026-01-02T11:59:30Z",
        "metadata": {},
    }
    text = status_text(running, pods, [event], NOW)
    assert "Phase:      Running    (restarts 1)" in text
    in_place = {**running, "status": {**running["status"], "restarts": 3, "inPlaceRestarts": 2}}
    assert "Phase:      Running    (restarts 3, 2 in place)" in status_text(in_place, pods, [], NOW)
    assert (
        "Workspace:  source upload, wanted generation 0, running generation 1 (sha256 ffffffffffff)" in text
    )
    assert "  Admitted  True    Admitted  queue q" in text
    assert "  train-0-abc  worker  0     gpu-node-0  Running  0" in text
    assert "  30s  Normal  Created  train   created Job train" in text


def test_list_and_status_show_progress_with_a_bar_rate_eta_and_metrics() -> None:
    progress = {
        "step": 420, "totalSteps": 1000, "percent": 42, "summary": "42%", "samplesPerSecond": 812.5,
        "eta": "2026-01-02T13:05:00Z", "metrics": {"loss": 1.84, "acc": 0.5}, "rank": 0,
        "updateTime": "2026-01-02T11:59:50Z",
    }  # fmt: skip
    reporting = job("Running", [], progress=progress)
    assert job_rows([reporting], NOW).splitlines()[1].split()[4:] == ["Running", "0", "42%", "-", "60m"]
    measured = job("Running", [], progress=progress, goodput={"summary": "83%", "seconds": {"good": 83}})
    assert job_rows([measured], NOW).splitlines()[1].split()[4:] == ["Running", "0", "42%", "83%", "60m"]
    assert (
        "Progress:   [########............] 42%  step 420/1000  812.5 samples/s  ETA 1h5m (13:05Z)  "
        "acc=0.5  loss=1.84  (rank 0, 10s ago)"
    ) in status_text(reporting, [], [], NOW)
    stepping = job("Running", [], progress={"step": 7, "summary": "step 7"})
    assert job_rows([stepping], NOW).splitlines()[1].split()[6] == "step"
    assert "Progress:   step 7\n" in status_text(stepping, [], [], NOW)
    assert "Progress:" not in status_text(job("Running", []), [], [], NOW)


def test_status_shows_the_latest_checkpoint_and_what_this_attempt_resumed_from() -> None:
    checkpoint = {"attempt": 1, "latest": "/checkpoints/step-8", "step": 8, "time": "2026-01-02T11:00:00Z",
                  "count": 2, "resumedFrom": "/checkpoints/step-8"}  # fmt: skip
    text = status_text(job("Running", [], checkpoint=checkpoint), [], [], NOW)
    assert (
        "Checkpoint: latest /checkpoints/step-8 (step 8, 2026-01-02T11:00:00Z, 2 complete); "
        "attempt 1 resumed from /checkpoints/step-8"
    ) in text.splitlines()
    fresh = status_text(job("Running", [], checkpoint={"attempt": 0, "count": 0}), [], [], NOW)
    assert "Checkpoint: none complete; attempt 0 started from scratch" in fresh.splitlines()
    assert "Checkpoint:" not in status_text(job("Running", []), [], [], NOW)  # nothing reported yet


def test_ages_like_kubectl() -> None:
    times = ("2026-01-02T11:59:15Z", "2026-01-02T11:55:00Z", "2026-01-01T09:00:00Z", None)
    assert [age(t, NOW) for t in times] == ["45s", "5m", "27h", "<unknown>"]


def test_plugin_error_carries_its_exit_code() -> None:
    assert PluginError("x", code=3).code == 3


# --- the upload's outcomes, with a stand-in for the exec websocket -------------------------------


class FakeExec:
    """An exec session whose command reads `size` bytes, then ends with `status` (or whose
    connection drops after `drop_after` bytes, with no status)."""

    def __init__(
        self,
        size: int,
        status: dict[str, Any] | None,
        stdout: bytes = b"",
        stderr: bytes = b"",
        drop_after: int | None = None,
    ) -> None:
        self.size, self.status, self.stdout, self.stderr, self.drop_after = (
            size,
            status,
            stdout,
            stderr,
            drop_after,
        )
        self.received = b""
        self.open = True
        self.url = ""

    def __call__(self, configuration: Any, url: str, **kwargs: Any) -> FakeExec:  # stands for WSClient
        assert kwargs["binary"] is True
        self.url = url
        return self

    def write_stdin(self, data: bytes) -> None:
        if self.drop_after is not None and len(self.received) >= self.drop_after:
            self.open = False
            raise WebSocketConnectionClosedException("Connection to remote host was lost.")
        self.received += data

    def update(self, timeout: float = 0) -> None:
        if len(self.received) >= self.size and self.drop_after is None:
            self.open = False  # the command read its bytes and ended

    def is_open(self) -> bool:
        return self.open

    def read_channel(self, channel: int) -> bytes:
        if self.open:
            return b""
        status = json.dumps(self.status).encode() if self.status is not None else b""
        return {1: self.stdout, 2: self.stderr, 3: status}[channel]

    def close(self) -> None:
        self.open = False


def run_upload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_for: Any) -> tuple[FakeExec, list[int]]:
    data = bytes(range(256)) * (upload_module.CHUNK // 64)  # four stdin frames
    (tmp_path / "a.tar.gz").write_bytes(data)
    archive = Archive(sha256="ab" * 32, size=len(data), files=1, bytes=1)
    fake = fake_for(len(data))
    monkeypatch.setattr(upload_module, "ws_client", SimpleNamespace(WSClient=fake))
    kube: Any = SimpleNamespace(namespace="ns", server="https://api:6443", configuration=None)
    sent: list[int] = []
    try:
        fake.marker = upload_module.upload(kube, "train", 0, archive, tmp_path / "a.tar.gz", sent.append)
    finally:
        assert fake.received == data[: len(fake.received)]
    return fake, sent


def test_a_successful_upload_returns_the_marker_after_sending_every_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = {"generation": 0, "sha256": "ab" * 32, "files": 1, "bytes": 1, "source": "upload"}
    fake, sent = run_upload(
        tmp_path,
        monkeypatch,
        lambda n: FakeExec(n, {"status": "Success"}, json.dumps(marker).encode() + b"\n"),
    )
    assert fake.marker == marker and sum(sent) == len(fake.received) == fake.size


def test_the_upload_execs_the_sync_protocols_receive_in_the_generations_sync_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, _ = run_upload(tmp_path, monkeypatch, lambda n: FakeExec(n, {"status": "Success"}))
    url = urllib.parse.urlsplit(fake.url)
    query = urllib.parse.parse_qs(url.query)
    assert (url.scheme, url.netloc) == ("wss", "api:6443")
    assert url.path == f"/api/v1/namespaces/ns/pods/{protocol.sync_pod_name('train', 0)}/exec"
    assert query["container"] == [protocol.CONTAINER]
    assert query["command"] == protocol.receive_argv(0, size=fake.size, sha256="ab" * 32)


def test_a_refused_upload_is_the_sync_programs_reason_and_says_to_retry_with_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "1"}]},
    }
    stderr = b"ChecksumMismatch: the upload's SHA-256 is 12ab, not abab\n"
    with pytest.raises(PluginError) as exc:
        run_upload(tmp_path, monkeypatch, lambda n: FakeExec(n, status, stderr=stderr))
    assert exc.value.message == (
        "upload failed: ChecksumMismatch: the upload's SHA-256 is 12ab, not abab; "
        "the job stays as it was; retry with `kubectl torchrun sync train`"
    )


def test_a_connection_lost_mid_upload_is_an_interrupted_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(PluginError) as exc:
        run_upload(tmp_path, monkeypatch, lambda n: FakeExec(n, None, drop_after=n // 2))
    assert exc.value.message == (
        "upload interrupted (connection lost: Connection to remote host was lost.); "
        "the job stays as it was; retry with `kubectl torchrun sync train`"
    )


def test_following_reattaches_to_replaced_pods_prints_each_line_once_and_stops_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = [pod("train-0-a", "0", phase="Running"), pod("train-1-a", "1", phase="Running")]
    second = [pod("train-0-b", "0", phase="Running"), pod("train-1-b", "1", phase="Pending")]
    # what the API shows on each refresh: the first attempt, then a whole-job restart's pods
    # (rank 1 still pending, then running), then the finished job
    script = [
        ("Running", first),
        ("Running", second),
        ("Running", [*second[:1], pod("train-1-b", "1", phase="Running")]),
        ("Succeeded", []),
    ]
    step = {"n": 0}

    def get_job(_kube: Any, name: str) -> dict[str, Any]:
        return job(script[step["n"]][0])

    def job_pods(*_: Any) -> list[dict[str, Any]]:
        pods = script[step["n"]][1]
        step["n"] = min(step["n"] + 1, len(script) - 1)
        return pods

    opened: list[str] = []

    class Kube:
        namespace = "ns"

        def open_lines(self, res: Any, name: str, subresource: str, params: Any) -> Any:
            assert (res.plural, subresource, params["follow"]) == ("pods", "log", "true")
            opened.append(name)
            return iter([f"{name} step 1\n".encode(), f"{name} step 2\n".encode()])

    monkeypatch.setattr(logs_module, "get_job", get_job)
    monkeypatch.setattr(logs_module, "job_pods", job_pods)
    out: list[str] = []
    final = LogFollower(Kube(), "train", None, prefix=True, out=out.append, refresh=0.01, grace=0.05).follow()  # type: ignore[arg-type]
    assert final["status"]["phase"] == "Succeeded"
    assert sorted(opened) == ["train-0-a", "train-0-b", "train-1-a", "train-1-b"]  # each pod once
    assert sorted(out) == sorted(
        f"[rank {r}] train-{r}-{g} step {s}" for r in (0, 1) for g in ("a", "b") for s in (1, 2)
    )


def test_status_says_first_what_holds_a_pending_job_back() -> None:
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "queue q"}
    synced = {"type": "WorkspaceReady", "status": "True", "reason": "Synced", "message": "generation 1"}
    config = {
        "type": "Running",
        "status": "False",
        "reason": "ContainerConfigError",
        "message": "pod train-0: container torchrun: CreateContainerConfigError: image will run as root",
    }
    lines = status_text(job("Pending", [admitted, synced, config]), [], [], NOW).splitlines()
    assert lines[lines.index(next(x for x in lines if x.startswith("Phase:"))) + 1] == (
        "Waiting:    Running=False ContainerConfigError: pod train-0: container torchrun: "
        "CreateContainerConfigError: image will run as root"
    )
    done = {"type": "Running", "status": "False", "reason": "Completed", "message": "done"}
    assert "Waiting:" not in status_text(job("Succeeded", [admitted, synced, done]), [], [], NOW)
    running = {"type": "Running", "status": "True", "reason": "AllWorkersRunning", "message": "2/2"}
    assert "Waiting:" not in status_text(job("Running", [admitted, synced, running]), [], [], NOW)
