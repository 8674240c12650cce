"""The reporter sidecar: when it pushes (a table of ticks), what /metrics says, which processes
`stack` dumps, and the whole loop against a local HTTPS server (the controller's side is tested
on the control plane, test/integration/test_progress.py)."""

from __future__ import annotations

import itertools
import json
import socket
import ssl
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from testbed import wait_until

from controller.progress.record import Record
from controller.progress.sidecar.reporter import HEARTBEAT_SECONDS, Pusher, https_sender, run
from controller.progress.sidecar.server import Latest, metric_lines
from controller.progress.sidecar.stack import python_processes
from controller.progress.tls import ca_bundle, self_signed, server_context


def test_pushes_follow_changes_heartbeats_and_backoff() -> None:
    sent: list[dict[str, Any]] = []
    answers = [200]
    pusher = Pusher("job", lambda body: (sent.append(body), answers[0])[1])
    latest = Latest()
    assert pusher.tick(latest, 0.0) is None  # nothing read yet
    latest.set(Record(step=1), 10.0)
    assert pusher.tick(latest, 10.5) == 200
    assert sent[-1] == {"job": "job", "record": {"step": 1}, "secondsSinceChange": 0.5}
    assert pusher.tick(latest, 11.0) is None  # nothing new
    latest.set(Record(step=2), 11.0)
    assert pusher.tick(latest, 11.5) is None  # at most every PUSH_MIN_SECONDS
    assert pusher.tick(latest, 12.6) == 200
    assert pusher.tick(latest, 20.0) is None
    assert pusher.tick(latest, 12.6 + 2 + HEARTBEAT_SECONDS) == 200  # a heartbeat: the age grows
    assert sent[-1]["secondsSinceChange"] == 12.6 + 2 + HEARTBEAT_SECONDS - 11.0
    answers[0] = 503  # a standby: retried with doubling backoff
    latest.set(Record(step=3), 50.0)
    times = [t for t in (x * 0.5 for x in range(100, 200)) if pusher.tick(latest, t) is not None]
    assert [b - a for a, b in itertools.pairwise(times)][:3] == [2.0, 4.0, 8.0]
    answers[0] = 403  # refused: not again before the heartbeat
    refused = Pusher("job", lambda body: answers[0])
    assert refused.tick(latest, 60.0) == 403
    assert refused.tick(latest, 60.0 + HEARTBEAT_SECONDS - 1) is None


class FakeTime:
    def __init__(self, start: float) -> None:
        self.now = start

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_stopping_sidecar_flushes_what_was_not_accepted() -> None:
    sent: list[dict[str, Any]] = []
    pusher = Pusher("job", lambda body: (sent.append(body), 200)[1])
    latest = Latest()
    t = FakeTime(0.0)
    assert pusher.flush(latest, clock=lambda: t.now, sleep=t.sleep) is None
    latest.set(Record(step=1), 0.0)
    assert pusher.tick(latest, 0.0) == 200
    latest.set(Record(step=2), 0.5)
    assert pusher.tick(latest, 0.6) is None  # within the interval
    t.now = 0.7
    assert pusher.flush(latest, clock=lambda: t.now, sleep=t.sleep) == 200 and sent[-1]["record"] == {
        "step": 2
    }
    assert pusher.flush(latest, clock=lambda: t.now, sleep=t.sleep) is None  # nothing new


def test_the_final_flush_retries_a_standby_until_the_leader_takes_it_within_its_budget() -> None:
    """The Service sends each connection to either replica: a standby's 503 (or no answer) is
    tried again at once-ish until the leader accepts, never past the budget; a refusal is not."""
    answers = iter([503, 0, 503, 200])
    pusher = Pusher("job", lambda body: next(answers))
    latest = Latest()
    latest.set(Record(step=9), 0.0)
    t = FakeTime(1.0)
    assert pusher.flush(latest, budget=10.0, clock=lambda: t.now, sleep=t.sleep) == 200
    assert t.now - 1.0 < 2.0  # 0.2 + 0.4 + 0.8 s of pauses

    stuck = Pusher("job", lambda body: 503)
    t = FakeTime(0.0)
    assert stuck.flush(latest, budget=5.0, clock=lambda: t.now, sleep=t.sleep) == 503
    assert t.now <= 5.0  # gave up inside the budget

    calls: list[int] = []
    refused = Pusher("job", lambda body: (calls.append(1), 403)[1])
    assert refused.flush(latest, budget=5.0, clock=lambda: 0.0, sleep=lambda s: None) == 403 and calls == [1]


def test_metrics_name_the_step_and_the_users_numbers() -> None:
    latest = Latest()
    assert list(metric_lines(latest, "1", 0.0)) == []
    latest.set(Record(step=7, total_steps=10, samples_per_second=3.5, metrics={"loss": 0.25}), 5.0)
    text = "\n".join(metric_lines(latest, "1", 8.0))
    assert 'torchrun_training_step{rank="1"} 7.0' in text
    assert 'torchrun_training_samples_per_second{rank="1"} 3.5' in text
    assert 'torchrun_training_seconds_since_change{rank="1"} 3.0' in text
    assert 'torchrun_training_metric{rank="1",name="loss"} 0.25' in text
    assert "torchrun_training_epoch" not in text


def fake_proc(root: Path, pid: int, argv: list[str], env: dict[str, str] | None, ppid: int = 1) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    if env is not None:  # None: unreadable, as another user's /proc/<pid>/environ is to the sidecar
        (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    (d / "stat").write_text(f"{pid} (x) S {ppid} 0 0")


def test_stack_dumps_every_python_process_but_the_reporter(tmp_path: Path) -> None:
    fake_proc(tmp_path, 1, ["/pause"], {})
    fake_proc(tmp_path, 10, ["/usr/bin/python3", "/usr/bin/torchrun", "train.py"], {"PATH": "/bin"})
    fake_proc(tmp_path, 11, ["/usr/bin/python3", "-u", "train.py"], {"RANK": "2"}, ppid=10)
    fake_proc(tmp_path, 12, ["/bin/sh", "-c", "sleep 1"], {"RANK": "3"})
    fake_proc(
        tmp_path, 18, ["python", "-m", "controller.progress.sidecar.reporter"], {}
    )  # the sidecar itself
    fake_proc(tmp_path, 20, ["python", "-m", "controller.progress.sidecar.reporter", "stack"], {})
    (tmp_path / "self").mkdir()
    assert python_processes(tmp_path, {20}) == [(10, "agent"), (11, "2")]


def test_stack_ranks_workers_whose_environment_it_cannot_read(tmp_path: Path) -> None:
    fake_proc(tmp_path, 5, ["/usr/bin/python3", "/usr/bin/torchrun", "train.py"], None)
    fake_proc(tmp_path, 9, ["/usr/bin/python3", "-u", "train.py"], None, ppid=5)
    fake_proc(tmp_path, 7, ["/usr/bin/python3", "-u", "train.py"], None, ppid=5)
    assert python_processes(tmp_path, set(), node_rank=1) == [(5, "agent"), (7, "2"), (9, "3")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_sidecar_tails_serves_metrics_and_pushes_with_the_token(tmp_path: Path) -> None:
    received: list[tuple[str, dict[str, Any]]] = []

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.headers["Authorization"], body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    server.socket = server_context(None).wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    progress, token, port = tmp_path / "progress.jsonl", tmp_path / "token", free_port()
    token.write_text("the-token\n")
    env = {
        "TORCHRUN_PROGRESS_FILE": str(progress),
        "TORCHRUN_PROGRESS_URL": f"https://127.0.0.1:{server.server_address[1]}/v1/progress",
        "TORCHRUN_PROGRESS_TOKEN_FILE": str(token),
        "TORCHRUN_JOB_NAME": "demo",
        "TORCHRUN_REPORTER_ADDRESS": f"127.0.0.1:{port}",
        "JOB_COMPLETION_INDEX": "0",
    }
    stop = threading.Event()
    loop = threading.Thread(target=run, args=(env, stop), daemon=True)
    loop.start()
    try:
        progress.write_bytes(b'{"step": 3, "total_steps": 9, "loss": 2}\n\xff garbage\n')
        wait_until(lambda: received, 10, message="a push")
        assert received[0] == (
            "Bearer the-token",
            {
                "job": "demo",
                "record": {"step": 3, "total_steps": 9, "loss": 2.0},
                "secondsSinceChange": received[0][1]["secondsSinceChange"],
            },
        )
        assert 0 <= received[0][1]["secondsSinceChange"] < 5
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'torchrun_training_step{rank="0"} 3.0' in metrics
    finally:
        stop.set()
        loop.join(5)
        server.shutdown()


def certificate_for_loopback() -> tuple[str, bytes]:
    """A self-signed certificate for IP 127.0.0.1 (its own CA) and its key, PEM."""
    cert, key = self_signed(days=1, subject="loopback", ips=("127.0.0.1",))
    return cert.decode(), key


def test_with_the_controllers_ca_the_reporter_verifies_the_endpoint(tmp_path: Path) -> None:
    """--progress-cert-dir with ca.crt: the reporter pushes to the endpoint that certificate
    signed, and to no other (a self-signed impostor gets nothing: no answer)."""
    cert, key = certificate_for_loopback()
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "tls.crt").write_text(cert)
    (certs / "tls.key").write_bytes(key)
    (certs / "ca.crt").write_text(cert)
    token = tmp_path / "token"
    token.write_text("t")
    answered: list[int] = []

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            answered.append(1)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    def serve(context: ssl.SSLContext) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    ca = ca_bundle(str(certs))
    assert ca == cert
    genuine, impostor = serve(server_context(str(certs))), serve(server_context(None))
    try:
        body = {"job": "j", "record": {"step": 1}, "secondsSinceChange": 0}
        url = "https://127.0.0.1:{}/v1/progress"
        assert https_sender(url.format(genuine.server_address[1]), str(token), ca)(body) == 200
        assert https_sender(url.format(impostor.server_address[1]), str(token), ca)(body) == 0
        assert answered == [1]
    finally:
        genuine.shutdown()
        impostor.shutdown()
