"""The newest checkpoint while a job runs: rank 0's sidecar scans the volume and tells it with its
reports; the controller parses it as untrusted input, keeps it per job, and shows it in
`status.checkpoint.newest` and `kubectl torchrun status` (controller/progress/saved.py)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from jobspecs import job, queue
from testbed import wait_until

from controller.api import CheckpointStatus, NewestCheckpoint, TorchrunJobStatus, to_json
from controller.plugin.views import status_text
from controller.progress.record import Record
from controller.progress.saved import Saved, newest_saved, parse_saved
from controller.progress.sidecar.reporter import HEARTBEAT_SECONDS, Pusher, run
from controller.progress.sidecar.server import Latest
from controller.progress.store import ProgressStore, SavedAt
from controller.progress.tls import server_context
from controller.torchrunjob import status as st
from controller.torchrunjob.progress import ProgressSettings, ProgressStep, show_newest_checkpoint

DCP = Path(__file__).parent.parent / "fixtures" / "checkpoints" / "dcp"
NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "step-20",
        {"name": "../other-ns/step-1", "step": 1, "ageSeconds": 1},  # a path, not an entry
        {"name": "step-1\n", "step": 1, "ageSeconds": 1},
        {"name": "x" * 256, "step": 1, "ageSeconds": 1},
        {"name": "step-1", "step": -1, "ageSeconds": 1},
        {"name": "step-1", "step": True, "ageSeconds": 1},
        {"name": "step-1", "step": 2**60, "ageSeconds": 1},
        {"name": "step-1", "step": 1, "ageSeconds": float("nan")},
        {"name": "step-1", "step": 1, "ageSeconds": -5},
        {"name": "step-1", "step": 1},
    ],
)
def test_a_checkpoint_a_pod_sends_is_parsed_as_untrusted_input(value: Any) -> None:
    assert parse_saved(value) is None


def test_real_names_parse_and_round_trip() -> None:
    for name, step in (
        ("epoch=0-step=10.ckpt", 10),
        ("checkpoint-20", 20),
        ("global_step5", 5),
        ("last.ckpt", None),
    ):
        saved = Saved(name, step, 12.5)
        assert parse_saved(json.loads(json.dumps(saved.to_json()))) == saved


def test_the_scan_finds_the_newest_complete_real_dcp_save_and_its_age(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    assert newest_saved(str(root)) is None
    assert newest_saved(str(tmp_path / "absent")) is None
    shutil.copytree(DCP / "step-10", root / "step-10")
    shutil.copytree(DCP / "step-20", root / "step-20")
    (root / "step-30").mkdir()  # a save in flight: no .metadata yet
    mtime = (root / "step-20" / ".metadata").stat().st_mtime
    found = newest_saved(str(root), now=mtime + 42)
    assert found is not None and (found.name, found.step) == ("step-20", 20)
    assert 41 <= found.age <= 43


def test_a_new_save_is_pushed_like_a_change_and_its_age_grows_from_the_scan() -> None:
    sent: list[dict[str, Any]] = []
    pusher = Pusher("job", lambda body: (sent.append(body), 200)[1])
    latest = Latest()
    latest.set(Record(step=5), 0.0)
    assert pusher.tick(latest, 0.0) == 200 and "checkpoint" not in sent[-1]
    assert pusher.tick(latest, 3.0) is None  # nothing new
    pusher.found(Saved("step-5", 5, 1.0), 3.0)
    assert pusher.tick(latest, 4.0) == 200
    assert sent[-1]["checkpoint"] == {"name": "step-5", "step": 5, "ageSeconds": 2.0}
    pusher.found(Saved("step-5", 5, 9.0), 10.0)  # scanned again: the same save
    assert pusher.tick(latest, 12.0) is None
    pusher.found(None, 20.0)  # an unreadable scan forgets nothing
    assert pusher.tick(latest, 21.0) is None
    # the save's push kept the heartbeats' beat: the next comes a heartbeat after the last change's
    assert pusher.tick(latest, 2.0 + HEARTBEAT_SECONDS - 0.5) is None
    assert pusher.tick(latest, 2.0 + HEARTBEAT_SECONDS) == 200


def test_the_store_dates_a_save_once_and_a_new_one_enqueues() -> None:
    store = ProgressStore()

    def report(saved: Saved | None, now: datetime) -> bool:
        """Step 7, unchanged since NOW (heartbeats say so by their age)."""
        return store.report(
            "ns/j", job_uid="u", attempt="w", rank=0, record=Record(step=7),
            seconds_since_change=(now - NOW).total_seconds(), now=now, saved=saved,
        )  # fmt: skip

    assert report(None, NOW)
    view = store.view("ns/j")
    assert view is not None and view.saved is None
    assert store.settle("ns/j", view.version)
    assert report(Saved("step-5", 5, 30.0), NOW + timedelta(seconds=2))  # a new save: a pass
    view = store.view("ns/j")
    assert view is not None and view.saved == SavedAt("step-5", 5, NOW - timedelta(seconds=28))
    assert store.settle("ns/j", view.version)
    assert not report(Saved("step-5", 5, 60.0), NOW + timedelta(seconds=32))  # told again: nothing
    view = store.view("ns/j")
    assert view is not None and view.saved is not None and view.saved.time == NOW - timedelta(seconds=28)


def test_the_status_shows_the_newest_beside_what_the_attempt_resumed_from() -> None:
    store = ProgressStore()
    step = ProgressStep(ProgressSettings(store, period=30))
    j = dataclasses.replace(job(), status=TorchrunJobStatus(checkpoint=CheckpointStatus(attempt=0, count=0)))
    store.report(
        "ns/j", job_uid="u-1", attempt="w-1", rank=0, record=Record(step=21),
        seconds_since_change=0, now=NOW, saved=Saved("step-20", 20, 35.000005),
    )  # fmt: skip
    p = st.StatusUpdate(j, NOW)
    p.decided(step.observe(j, queue(), {"metadata": {"uid": "w-1"}}, (), p.status, p.now).decision)
    checkpoint = p.status.checkpoint
    assert checkpoint is not None
    assert checkpoint.newest == NewestCheckpoint("step-20", 20, NOW - timedelta(seconds=36))
    assert checkpoint.resumed_from is None and checkpoint.count == 0  # the start's, kept
    page = status_text(to_json(dataclasses.replace(j, status=p.final())), [], [], NOW + timedelta(seconds=4))
    assert "Checkpoint: newest step-20 (step 20, saved 40s ago); attempt 0 started from scratch" in page
    # the same save told again writes nothing
    again = st.StatusUpdate(dataclasses.replace(j, status=p.final()), NOW + timedelta(seconds=31))
    again.decided(
        show_newest_checkpoint(
            SavedAt("step-20", 20, NOW - timedelta(seconds=35, microseconds=5)), again.status
        )
    )
    assert again.status.checkpoint == checkpoint


def test_the_sidecar_of_rank_0_sends_the_newest_save_and_the_one_made_on_stop(tmp_path: Path) -> None:
    received: list[dict[str, Any]] = []

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    server.socket = server_context(None).wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = tmp_path / "ckpt"
    shutil.copytree(DCP / "step-10", root / "step-10")
    progress, token = tmp_path / "progress.jsonl", tmp_path / "token"
    token.write_text("t\n")
    env = {
        "TORCHRUN_PROGRESS_FILE": str(progress),
        "TORCHRUN_PROGRESS_URL": f"https://127.0.0.1:{server.server_address[1]}/v1/progress",
        "TORCHRUN_PROGRESS_TOKEN_FILE": str(token),
        "TORCHRUN_JOB_NAME": "demo",
        "TORCHRUN_REPORTER_ADDRESS": "127.0.0.1:0",
        "TORCHRUN_CHECKPOINT_DIR": str(root),
        "JOB_COMPLETION_INDEX": "0",
    }
    stop = threading.Event()
    loop = threading.Thread(target=run, args=(env, stop), daemon=True)
    loop.start()
    try:
        progress.write_text('{"step": 10}\n')
        wait_until(lambda: received, 10, message="a push")
        assert received[0]["checkpoint"]["name"] == "step-10" and received[0]["checkpoint"]["step"] == 10
        shutil.copytree(DCP / "step-20", root / "step-20")  # saved on SIGTERM, as the docs ask
        with progress.open("a") as f:
            f.write('{"step": 20}\n')
    finally:
        stop.set()
        loop.join(30)
        server.shutdown()
    assert received[-1]["record"] == {"step": 20} and received[-1]["checkpoint"]["name"] == "step-20"
