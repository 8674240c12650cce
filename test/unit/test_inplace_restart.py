"""Restarts in place without a cluster: the supervisor run as the pod runs it (a real process,
real signals, a stand-in torchrun that records what it was started with), the sidecar's link (a
table of ticks), the word the endpoint answers, and the controller's decision (a table). The real
node proves the whole path with torch (test/e2e/test_realnode.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from testbed import wait_until

from controller.api import TorchrunJobStatus
from controller.api.labels import GENERATION_ANNOTATION
from controller.progress.sidecar.inplace import (
    FAST_SECONDS,
    RETRY_SECONDS,
    SOON_SECONDS,
    WATCH_SECONDS,
    State,
    Watcher,
    parse_state,
)
from controller.progress.stall import RankState, decide
from controller.progress.supervisors import SupervisorStates, Told, word
from controller.sync import layout
from controller.torchrunjob.inplace import (
    failure_of,
    newcomers,
    rejoin,
    restart,
    restart_stalled,
    restarted_at,
    running_generation,
)
from controller.torchrunjob.manifests.inplace import KILL_GRACE_SECONDS
from controller.torchrunjob.progress import later
from controller.torchrunjob.reload import reload_in_place
from controller.torchrunjob.status import Outcome

SUPERVISOR = Path(__file__).parents[2] / "controller" / "tools" / "python" / "torchrun_supervisor.py"
sys.path.insert(0, str(SUPERVISOR.parent))
import torchrun_standby  # noqa: E402
import torchrun_supervisor  # noqa: E402
import torchrun_workspace  # noqa: E402

# a stand-in torchrun: appends what it was started with to $LOG, then does what $PLAN says for
# its generation (exit N, or "hang": sleep, ignoring SIGTERM, with a daemonized grandchild)
FAKE_TORCHRUN = r"""
import json, os, signal, subprocess, sys, time
gen = os.environ["TORCHRUN_IN_PLACE_GENERATION"]
with open(os.environ["LOG"], "a") as f:
    f.write(json.dumps({"gen": gen, "args": sys.argv[1:], "pid": os.getpid()}) + "\n")
plan = json.loads(os.environ["PLAN"]).get(gen, 0)
if plan == "saves-on-stop":  # a program that saves on SIGTERM and exits 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(600)
if plan == "hang":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    with open(os.environ["LOG"] + ".grandchild", "w") as f:
        f.write(str(child.pid))
    time.sleep(600)
sys.exit(plan)
"""


class Pod:
    """The supervisor in a process of its own, its control and state files in `tmp`."""

    def __init__(
        self,
        tmp: Path,
        plan: dict[str, Any],
        permanent: str = "",
        extra: dict[str, str] | None = None,
        prefix: str = "",
    ) -> None:
        self.tmp = tmp
        (tmp / "torchrun").write_text(prefix + FAKE_TORCHRUN)
        self.control, self.state, self.log = tmp / "generation.json", tmp / "supervisor.json", tmp / "log"
        env = {
            **os.environ,
            "TORCHRUN_IN_PLACE": "1",
            "TORCHRUN_CONTROL_FILE": str(self.control),
            "TORCHRUN_SUPERVISOR_FILE": str(self.state),
            "TORCHRUN_PERMANENT_EXIT_CODES": permanent,
            "TORCHRUN_DECISION_SECONDS": "5",
            "TORCHRUN_KILL_AFTER_SECONDS": "1",
            "PET_NODE_RANK": "1",  # not rank 0: no store to host (and no torch here)
            "LOG": str(self.log),
            "PLAN": json.dumps(plan),
            **(extra or {}),
        }
        argv = [sys.executable, str(tmp / "torchrun"), "--nnodes=2", "--rdzv_id=uid-1", "train.py"]
        self.proc = subprocess.Popen(
            [sys.executable, str(SUPERVISOR), *argv], env=env, stderr=subprocess.PIPE
        )

    def say(self, generation: int, final: bool = False) -> None:
        tmp = self.tmp / "word.tmp"
        tmp.write_text(json.dumps({"generation": generation, "final": final}))
        tmp.rename(self.control)

    def told(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state.read_text()))
        except (OSError, ValueError):
            return {}

    def starts(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def wait(self) -> int:
        return self.proc.wait(30)


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[list[Pod]]:
    made: list[Pod] = []
    yield made
    for pod in made:
        if pod.proc.poll() is None:
            pod.proc.kill()
            pod.proc.wait()


def test_with_generation_changes_only_the_rendezvous_id() -> None:
    args = ["--nnodes=2", "--rdzv_id=abc", "train.py", "--rdzv_id=user"]
    assert torchrun_supervisor.with_generation(args, 0) == args
    assert torchrun_supervisor.with_generation(args, 3) == [
        "--nnodes=2",
        "--rdzv_id=abc-3",
        "train.py",
        "--rdzv_id=user",
    ]
    assert torchrun_supervisor.with_generation(["--rdzv-id", "x", "t.py"], 2) == ["--rdzv-id", "x-2", "t.py"]


def test_a_failure_waits_for_the_word_and_the_next_generation_starts_fresh(
    tmp_path: Path, pods: list[Pod]
) -> None:
    pod = Pod(tmp_path, {"0": 3, "1": 0, "2": 0})
    pods.append(pod)
    wait_until(lambda: pod.told().get("state") == "waiting", timeout=10)
    assert pod.starts() == []  # nothing starts before the controller names the generation
    pod.say(0)
    wait_until(lambda: pod.told().get("state") == "failed", timeout=10)
    assert pod.told() | {"pid": 0} == {"generation": 0, "state": "failed", "exitCode": 3, "pid": 0}
    time.sleep(0.5)
    assert pod.proc.poll() is None  # it waits for the controller
    pod.say(1)
    wait_until(lambda: pod.told().get("state") == "succeeded", timeout=10)
    time.sleep(0.5)
    assert pod.proc.poll() is None  # done only when every rank is: it waits for `final`
    pod.say(2)  # another rank's pod was replaced meanwhile: this rank starts generation 2 with it
    wait_until(lambda: len(pod.starts()) == 3 and pod.told().get("generation") == 2, timeout=10)
    wait_until(lambda: pod.told().get("state") == "succeeded", timeout=10)
    pod.say(2, final=True)  # every rank succeeded in generation 2
    assert pod.wait() == 0
    starts = pod.starts()
    assert [s["gen"] for s in starts] == ["0", "1", "2"]
    assert "--rdzv_id=uid-1" in starts[0]["args"] and "--rdzv_id=uid-1-1" in starts[1]["args"]
    assert pod.told()["state"] == "succeeded"


def test_a_permanent_code_ends_the_pod_at_once_and_final_or_silence_ends_it_with_the_code(
    tmp_path: Path, pods: list[Pod]
) -> None:
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    permanent = Pod(tmp_path / "a", {"0": 42}, permanent="42 43")
    final = Pod(tmp_path / "b", {"0": 5})
    silent = Pod(tmp_path / "c", {"0": 6})
    pods.extend([permanent, final, silent])
    for pod in pods:
        wait_until(lambda pod=pod: pod.told().get("state") == "waiting", timeout=10)
        pod.say(0)
    assert permanent.wait() == 42
    wait_until(lambda: final.told().get("state") == "failed", timeout=10)
    final.say(0, final=True)
    assert final.wait() == 5
    started = time.monotonic()
    assert silent.wait() == 6  # TORCHRUN_DECISION_SECONDS=5 without a word
    assert time.monotonic() - started > 2
    assert b"no word from the controller" in silent.proc.stderr.read()  # type: ignore[union-attr]


def test_a_newer_generation_stops_a_hung_torchrun_and_everything_under_it(
    tmp_path: Path, pods: list[Pod]
) -> None:
    pod = Pod(tmp_path, {"0": "hang", "1": 0})
    pods.append(pod)
    wait_until(lambda: pod.told().get("state") == "waiting", timeout=10)
    pod.say(0)
    grandchild_file = Path(str(pod.log) + ".grandchild")
    wait_until(grandchild_file.exists, timeout=10)
    grandchild = int(grandchild_file.read_text())
    pod.say(1)  # another rank failed, or the controller asked: generation 1
    told = lambda: (pod.told().get("generation"), pod.told().get("state"))  # noqa: E731
    wait_until(lambda: told() == (1, "succeeded"), timeout=10)
    pod.say(1, final=True)
    assert pod.wait() == 0  # SIGTERM ignored: SIGKILL after KILL_AFTER, then generation 1 ran
    assert [s["gen"] for s in pod.starts()] == ["0", "1"]
    assert (
        not Path(f"/proc/{grandchild}").exists()
        or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]
    )


def test_sigterm_is_torchruns(tmp_path: Path, pods: list[Pod]) -> None:
    pod = Pod(tmp_path, {"0": "hang"})
    pods.append(pod)
    wait_until(lambda: pod.told().get("state") == "waiting", timeout=10)
    pod.proc.terminate()  # the kubelet stops a pod still waiting for its word
    assert pod.wait() == 143


def test_a_stopped_pod_never_ends_as_done_even_when_torchrun_exits_0(tmp_path: Path, pods: list[Pod]) -> None:
    """An evicted pod (a drain, a lost node) whose program saves on SIGTERM and exits 0: the
    container ends 143, not 0, so the worker Job replaces the rank instead of counting it done
    (its `DisruptionTarget` makes podFailurePolicy ignore the failure)."""
    pod = Pod(tmp_path, {"0": "saves-on-stop"})
    pods.append(pod)
    wait_until(lambda: pod.told().get("state") == "waiting", timeout=10)
    pod.say(0)
    wait_until(lambda: pod.told().get("state") == "running" and len(pod.starts()) == 1, timeout=10)
    time.sleep(0.5)  # the stand-in torchrun has set its handler
    pod.proc.terminate()
    assert pod.wait() == 143
    assert pod.told()["state"] == "stopped" and pod.told()["exitCode"] == 0


# a module the stand-in torchrun imports at its top level (as torchrun's script imports torch):
# it records which process imported it, and when, in $LOG.imports
IMPORT_PROBE = """
import json, os, sys, time
with open(os.environ["LOG"] + ".imports", "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "at": time.time()}) + "\\n")
"""
# ... and what it runs with, as Python sets it for `python <script>`
RUN_AS = r"""import import_probe, json, os, sys
with open(os.environ["LOG"] + ".as", "a") as f:
    env = {k: v for k, v in os.environ.items() if k != "TORCHRUN_IN_PLACE_GENERATION"}
    f.write(json.dumps({"argv0": sys.argv[0], "path0": sys.path[0], "cwd": os.getcwd(),
                        "exe": sys.executable, "env": env, "stdin": os.fstat(0).st_ino,
                        "main": __name__, "file": __file__}) + "\n")
"""


def standby_pod(tmp: Path, standby: str) -> Pod:
    """A pod whose stand-in torchrun imports the probe; gen 0 exits 3, gen 1 and 2 succeed."""
    tmp.mkdir()
    (tmp / "import_probe.py").write_text(IMPORT_PROBE)
    extra = {"TORCHRUN_STANDBY": standby, "TORCHRUN_STANDBY_DELAY_SECONDS": "0"}
    return Pod(tmp, {"0": 3, "1": 0}, extra=extra, prefix=RUN_AS)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_two_generations(pod: Pod) -> float:
    """Generation 0 (fails), then 1 (succeeds, final); the time generation 1 was asked."""
    wait_until(lambda: pod.told().get("state") == "waiting", timeout=10)
    pod.say(0)
    wait_until(lambda: pod.told().get("state") == "failed", timeout=10)
    time.sleep(1.0)  # the next standby, started with generation 0, has imported its modules
    asked = time.time()
    pod.say(1)
    wait_until(lambda: pod.told().get("state") == "succeeded", timeout=10)
    pod.say(1, final=True)
    assert pod.wait() == 0
    return asked


def test_a_later_torchrun_comes_from_a_standby_that_imported_ahead_and_runs_as_a_fresh_one(
    tmp_path: Path, pods: list[Pod]
) -> None:
    """With the standby, generation 1's torchrun had imported its modules before generation 1
    was asked; without it (`TORCHRUN_STANDBY=0`), after. Either way the script ran with the same
    argv[0], sys.path[0], interpreter, working directory, stdin and environment (but the
    generation), as `__main__`."""
    warm, cold = standby_pod(tmp_path / "warm", "1"), standby_pod(tmp_path / "cold", "0")
    pods.extend([warm, cold])
    asked = {"warm": run_two_generations(warm), "cold": run_two_generations(cold)}
    for name, pod in (("warm", warm), ("cold", cold)):
        starts, imports = pod.starts(), records(Path(str(pod.log) + ".imports"))
        assert [s["gen"] for s in starts] == ["0", "1"], (name, starts)
        imported = {i["pid"]: i["at"] for i in imports}
        gen1 = imported[starts[1]["pid"]]  # the process that ran generation 1 imported the probe
        assert (gen1 < asked[name]) == (name == "warm"), (name, gen1, asked[name])
    ran_as = {name: records(Path(str(pod.log) + ".as")) for name, pod in (("warm", warm), ("cold", cold))}
    for name, (first, second) in ran_as.items():
        assert first == second, name  # each generation ran as the one before
        script = str(tmp_path / name / "torchrun")
        assert first["main"] == "__main__" and first["argv0"] == first["file"] == script
        assert first["path0"] == str(tmp_path / name) and first["exe"] == sys.executable
    cold_env, warm_env = ran_as["cold"][0].pop("env"), ran_as["warm"][0].pop("env")
    assert {k: v.replace("/warm", "/cold") for k, v in warm_env.items() if k != "TORCHRUN_STANDBY"} == {
        k: v for k, v in cold_env.items() if k != "TORCHRUN_STANDBY"
    }


def test_a_standby_that_died_is_replaced_by_a_plain_start_and_none_outlives_the_supervisor(
    tmp_path: Path, pods: list[Pod]
) -> None:
    pod = standby_pod(tmp_path / "p", "1")
    pods.append(pod)
    wait_until(lambda: pod.told().get("state") == "waiting", timeout=10)
    pod.say(0)
    wait_until(lambda: pod.told().get("state") == "failed", timeout=10)
    standby = wait_until(lambda: standbys(pod.proc.pid), timeout=10)
    for pid in standby:
        os.kill(pid, 9)
    # dead (a zombie, or gone) before generation 1 is asked: on a loaded machine a standby still
    # dying could take generation 1's order, and its SIGKILL would end generation 1 instead
    wait_until(lambda: not set(standby) & set(standbys(pod.proc.pid)), timeout=10)
    pod.say(1)
    wait_until(lambda: pod.told().get("state") == "succeeded", timeout=10)
    assert [s["gen"] for s in pod.starts()] == ["0", "1"]
    assert standbys(pod.proc.pid), "a new standby waits for the next generation"
    pod.say(1, final=True)
    assert pod.wait() == 0
    assert not standbys(None, str(tmp_path / "p" / "torchrun")), "the standby outlived the supervisor"


SPARE_PROBE = r"""
import os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import torchrun_supervisor as s
quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
nested = f"import subprocess, time; subprocess.Popen({sleeper!r}); time.sleep(60)"
spared = subprocess.Popen([sys.executable, "-c", nested], **quiet)
other = subprocess.Popen(sleeper, **quiet)

def stat(pid):  # None once the process is gone (any process of the machine may exit meanwhile)
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[-1].split()
    except OSError:
        return None

def under():
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    return [int(p) for p in pids if (stat(p) or ["", ""])[1] == str(spared.pid)]

try:
    deadline = time.monotonic() + 30
    while not under() and time.monotonic() < deadline:  # the spared one starts what runs under it
        time.sleep(0.05)
    found = under()
    s.kill_descendants(spared.pid)
    alive = lambda pid: (stat(pid) or ["Z"])[0] != "Z"
    print(alive(spared.pid), alive(other.pid), len(found), any(alive(pid) for pid in found))
finally:
    for proc in (spared, other):
        proc.kill()
"""


def test_a_stop_spares_the_standby_but_not_what_runs_under_it() -> None:
    """`kill_descendants(spared)`: the standby lives on; every other process, and anything a
    program made the standby start, is killed (a worker cannot hide under the standby)."""
    probe = [sys.executable, "-c", SPARE_PROBE, str(SUPERVISOR.parent)]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["True", "False", "1", "False"], done.stdout + done.stderr


def standbys(parent: int | None, script: str = "") -> list[int]:
    """Live standby processes: `parent`'s children, or any naming `script`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if not any(arg.endswith(b"torchrun_standby.py") for arg in cmdline) or stat[0] == "Z":
            continue
        if parent is not None and stat[1] != str(parent):
            continue
        if script and script.encode() not in cmdline:
            continue
        found.append(int(entry.name))
    return found


def test_the_standby_runs_only_python_scripts_as_the_kernel_would(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}

    def script(name: str, first: str) -> str:
        (tmp_path / name).write_text(first + "\nprint(1)\n")
        (tmp_path / name).chmod(0o755)
        return name

    python = sys.executable
    console = script("torchrun", f"#!{python}")
    assert torchrun_supervisor.python_script([console, "--nnodes=2"], env) == (
        python, str(tmp_path / "torchrun"), ["--nnodes=2"],
    )  # fmt: skip
    (tmp_path / "python3").symlink_to(python)
    assert torchrun_supervisor.python_script([script("via-env", "#!/usr/bin/env python3"), "x"], env) == (
        str(tmp_path / "python3"), str(tmp_path / "via-env"), ["x"],
    )  # fmt: skip
    assert torchrun_supervisor.python_script([script("flags", f"#!{python} -s")], env) is None
    assert torchrun_supervisor.python_script([script("shell", "#!/bin/sh")], env) is None
    assert torchrun_supervisor.python_script(["missing"], env) is None
    local = tmp_path / "t.py"
    local.write_text("")
    assert torchrun_supervisor.python_script(["python3", str(local), "a"], env) == (
        str(tmp_path / "python3"), str(local), ["a"],
    )  # fmt: skip
    assert torchrun_supervisor.python_script(["python3", "-m", "torch.distributed.run"], env) is None


def test_the_standby_imports_only_what_the_script_will_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's console script imports its module at the top level; Debian's easy-install script
    names a distribution's entry point in its header and loads it through its metadata."""
    source = "import re, sys\nfrom torch.distributed.run import main\nfrom . import x\nif 1:\n    import y\n"
    assert torchrun_standby.top_level_imports(source) == ["re", "sys", "torch.distributed.run"]
    assert torchrun_standby.top_level_imports("def (") == []
    info = tmp_path / "torch-2.6.0+debian.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.6.0+debian\n")
    (info / "entry_points.txt").write_text(
        "[console_scripts]\ntorchfrtrace = tools.flight_recorder.fr_trace:main\n"
        "torchrun = torch.distributed.run:main\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    header = "# EASY-INSTALL-ENTRY-SCRIPT: '{}','console_scripts','{}'\nimport re\n"
    assert torchrun_standby.entry_point_modules(header.format("torch==2.6.0+debian", "torchrun")) == [
        "torch.distributed.run"
    ]
    assert torchrun_standby.entry_point_modules(header.format("torch==2.6.0+debian", "other")) == []
    assert torchrun_standby.entry_point_modules(header.format("no-such-dist==1", "torchrun")) == []
    assert torchrun_standby.entry_point_modules(source) == []


class Link:
    def __init__(self, answers: list[tuple[int, Any]]) -> None:
        self.answers, self.sent, self.written = answers, [], []  # type: ignore[var-annotated]
        self.state: State | None = None
        self.watcher = Watcher(
            "job", self.send, lambda: self.state, lambda w: (self.written.append(w), True)[1]
        )

    def send(self, body: dict[str, Any]) -> tuple[int, Any]:
        self.sent.append(body)
        return self.answers[0]


def test_the_link_posts_changes_at_once_polls_fast_while_waiting_and_writes_each_new_word() -> None:
    link = Link([(200, {"inPlace": {"generation": 0, "final": False}})])
    link.state = State(0, "waiting", None)
    assert link.watcher.tick(0.0) == 200 and link.written == [{"generation": 0, "final": False}]
    link.state = State(0, "running", None)
    assert link.watcher.tick(0.1) == 200  # a change: at once
    assert link.watcher.tick(0.2) is None
    assert link.watcher.tick(0.1 + WATCH_SECONDS) == 200  # healthy: every WATCH_SECONDS
    assert len(link.written) == 1  # the same word is not written again
    link.state = State(0, "failed", 1)
    assert link.watcher.tick(3.0) == 200
    assert link.watcher.tick(3.0 + FAST_SECONDS) == 200  # waiting for a word: fast
    link.answers[0] = (200, {"inPlace": {"generation": 1, "final": False}})
    assert link.watcher.tick(3.0 + 2 * FAST_SECONDS) == 200
    assert link.written[-1] == {"generation": 1, "final": False}
    assert link.sent[-1] == {"job": "job", "inPlace": {"generation": 0, "state": "failed", "exitCode": 1}}
    link.answers[0] = (503, None)
    link.state = State(1, "running", None)
    assert link.watcher.tick(10.0) == 503
    assert link.watcher.tick(10.0 + RETRY_SECONDS / 2) is None  # a change waits for the retry
    assert link.watcher.tick(10.0 + RETRY_SECONDS) == 503


def test_states_are_parsed_strictly() -> None:
    assert parse_state({"generation": 2, "state": "failed", "exitCode": 1}) == State(2, "failed", 1)
    for bad in (
        {"generation": -1, "state": "running"},
        {"generation": 1, "state": "x"},
        {"generation": True, "state": "running"},
        {"generation": 1, "state": "failed", "exitCode": 999},
        [],
        None,
    ):
        assert parse_state(bad) is None


def _job(restarts: int, in_place: int, generation: int, finished: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Failed", "status": "True"}] if finished else []
    return {
        "status": {
            "restarts": restarts,
            "inPlaceRestarts": in_place,
            "inPlaceGeneration": generation,
            "conditions": conditions,
        }
    }


def _worker_job(uid: str, restart: int) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "annotations": {"torchrun.ai/restart": str(restart)}}}


def test_the_word_is_final_once_every_rank_succeeded_in_the_current_generation() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    job = {"status": {"restarts": 1, "inPlaceRestarts": 1, "inPlaceGeneration": 2}}
    # an elastic job of up to 4 nodes running 2: its current size counts, not completions
    worker = {"metadata": {"uid": "a", "annotations": {}}, "spec": {"completions": 4, "parallelism": 2}}
    done = lambda g: Told(State(g, "succeeded", 0), now, "p")  # noqa: E731
    running = Told(State(2, "running", None), now, "p")
    assert word(job, worker, "a", {0: done(2), 1: running}) == {
        "generation": 2,
        "final": False,
        "soon": False,
    }
    assert word(job, worker, "a", {0: done(2), 1: done(1)}) == {
        "generation": 2,
        "final": False,
        "soon": False,
    }
    assert word(job, worker, "a", {0: done(2), 1: done(2)}) == {"generation": 2, "final": True, "soon": False}
    assert word(job, worker, "a", {0: done(2)}) == {
        "generation": 2,
        "final": False,
        "soon": False,
    }  # rank 1 not heard


def test_the_word_names_the_current_attempts_generation_and_ends_an_old_attempt() -> None:
    assert word(_job(3, 2, 5), _worker_job("w", 1), "w") == {"generation": 5, "final": False, "soon": False}
    assert word(_job(3, 2, 5), _worker_job("w", 0), "w") == {
        "generation": 0,
        "final": True,
        "soon": False,
    }  # old attempt
    assert word(_job(3, 2, 5), _worker_job("new", 1), "w") == {
        "generation": 0,
        "final": True,
        "soon": False,
    }  # replaced
    assert word(_job(3, 2, 5, finished=True), _worker_job("w", 1), "w")["final"] is True


def test_the_word_says_soon_from_a_claimed_generation_until_its_reload_is_asked() -> None:
    job = _job(0, 0, 0)
    worker = {
        "metadata": {"uid": "w", "annotations": {"torchrun.ai/restart": "0", GENERATION_ANNOTATION: "1"}}
    }
    assert word(job, worker, "w")["soon"] is False  # generation 1 runs: nothing claimed past it
    job["spec"] = {"workspace": {"generation": 2}}  # `kubectl torchrun sync` claimed generation 2
    assert word(job, worker, "w") == {"generation": 0, "final": False, "soon": True}
    job["status"]["workspaceGeneration"] = 2  # synced, its reload not yet asked: still soon
    assert word(job, worker, "w")["soon"] is True
    job["status"] |= {"inPlaceWorkspaceGeneration": 2, "inPlaceGeneration": 1}  # asked
    assert word(job, worker, "w") == {"generation": 1, "final": False, "soon": False}
    job["spec"]["workspace"]["generation"] = 3
    assert word(job, {**worker, "metadata": {"uid": "other"}}, "w")["soon"] is False  # final: an old attempt
    bad = {"metadata": {"uid": "w", "annotations": {"torchrun.ai/restart": "0", GENERATION_ANNOTATION: "x"}}}
    assert word(job, bad, "w")["soon"] is True  # an unreadable annotation counts as generation 0


def test_soon_polls_fast_for_a_bounded_time_only() -> None:
    link = Link([(200, {"inPlace": {"generation": 0, "final": False, "soon": True}})])
    link.state = State(0, "running", None)
    assert link.watcher.tick(0.0) == 200 and link.written == [{"generation": 0, "final": False}]
    assert link.watcher.tick(FAST_SECONDS) == 200  # a reload is on its way: fast, though running
    assert link.watcher.tick(SOON_SECONDS - 0.1) == 200  # still within the bound: fast
    bound = SOON_SECONDS - 0.1 + FAST_SECONDS
    assert link.watcher.tick(bound) == 200  # past the bound: an upload that never came...
    assert link.watcher.tick(bound + FAST_SECONDS) is None  # ...costs no more than a healthy pod
    assert link.watcher.tick(bound + WATCH_SECONDS) == 200
    link.answers[0] = (200, {"inPlace": {"generation": 1, "final": False, "soon": False}})
    t = bound + 2 * WATCH_SECONDS
    assert link.watcher.tick(t) == 200
    assert link.written[-1] == {"generation": 1, "final": False}  # `soon` is not part of the word
    link.answers[0] = (200, {"inPlace": {"generation": 1, "final": False, "soon": True}})
    assert link.watcher.tick(t + WATCH_SECONDS) == 200  # a new claim...
    assert link.watcher.tick(t + WATCH_SECONDS + FAST_SECONDS) == 200  # ...is fast again


def test_supervisor_states_tell_changes_and_keep_one_attempt() -> None:
    states, now = SupervisorStates(), datetime(2026, 1, 1, tzinfo=UTC)
    assert states.tell("ns/j", attempt="a", rank=0, state=State(0, "running", None), now=now)
    assert not states.tell("ns/j", attempt="a", rank=0, state=State(0, "running", None), now=now)
    assert states.tell("ns/j", attempt="b", rank=1, state=State(0, "running", None), now=now)
    assert list(states.view("ns/j", "b")) == [1] and states.view("ns/j", "a") == {}


def test_restart_in_place_counts_once_by_its_code() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    told = {
        0: Told(State(2, "failed", 1), now),
        1: Told(State(2, "failed", 7), now),
        2: Told(State(1, "failed", 9), now),  # an older generation: answered already
        3: Told(State(2, "running", None), now),
    }
    failure = failure_of(told, 2)
    assert failure is not None and failure.ranks == (0, 1) and failure.exit_code == 1
    assert failure_of(told, 3) is None  # the restart was decided: the same failure is not counted again
    status = TorchrunJobStatus(restarts=1, in_place_restarts=1, in_place_generation=2)
    decided = restart(
        failure, status, limit=3, retriable_codes=(), retriable_cap=10, retriable_failures=0, now=now
    )
    assert decided is not None and decided.stop
    assert decided.changes == {
        "in_place_generation": 3,
        "in_place_restart_time": now,
        "restarts": 2,
        "in_place_restarts": 2,
        "restarts_by_reason": {"WorkersFailed": 1},
    }
    assert "restart 2 of 3, in place (generation 3)" in decided.conditions[0].message
    retriable = restart(
        failure, status, limit=3, retriable_codes=(1,), retriable_cap=2, retriable_failures=1, now=now
    )
    assert retriable is not None and retriable.changes == {
        "in_place_generation": 3,
        "in_place_restart_time": now,
        "retriable_failures": 2,
    }
    over_cap = restart(
        failure, status, limit=3, retriable_codes=(1,), retriable_cap=1, retriable_failures=1, now=now
    )
    assert over_cap is not None and over_cap.changes["restarts"] == 2  # past the cap: a counted restart
    spent = TorchrunJobStatus(restarts=3, in_place_restarts=1, in_place_generation=2)
    assert (
        restart(failure, spent, limit=3, retriable_codes=(), retriable_cap=10, retriable_failures=0, now=now)
        is None
    )
    assert failure.outcome().reason == "WorkersFailed"


def test_a_stall_restarts_in_place_counted_by_its_reason_while_restarts_remain() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    status = TorchrunJobStatus(restarts=0, in_place_generation=0, restarts_by_reason={})
    for reason in ("Stalled", "StartupStalled"):
        decided = restart_stalled(Outcome(False, reason, "no step for 30s"), status, limit=1, now=now)
        assert decided is not None and decided.changes == {
            "restarts": 1,
            "in_place_restarts": 1,
            "restarts_by_reason": {reason: 1},
            "in_place_generation": 1,
            "in_place_restart_time": now,
        }
        assert decided.conditions[0].reason == "RestartedInPlace"
        assert f"after: {reason}: no step for 30s" in decided.conditions[0].message
    spent = TorchrunJobStatus(restarts=1, in_place_restarts=1, in_place_generation=1)
    assert restart_stalled(Outcome(False, "Stalled", "x"), spent, limit=1, now=now) is None


def test_the_stall_clock_starts_again_at_a_restart_in_place() -> None:
    """A rank silent since before the restart is not stalled until the timeout passed since the
    restart (`later` feeds `stall.decide` the restart time as a start)."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ranks = [RankState(0, 12, t0, t0 + timedelta(seconds=40))]
    restarted = t0 + timedelta(seconds=35)
    now = t0 + timedelta(seconds=40)
    assert decide(ranks, 30, now, later(None, None)).stalled  # 40 s silent: stalled
    assert not decide(ranks, 30, now, later(None, restarted)).stalled  # restarted 5 s ago
    assert later(t0, restarted) == restarted and later(restarted, None) == restarted


def test_the_clocks_start_again_when_every_rank_runs_the_named_generation() -> None:
    """Once every rank runs the generation named in place, its clocks start then; while one does
    not yet, the supervisors' kill grace after it was named — so a rank hung past SIGTERM does not
    eat into the new generation's stall or startup timeout, and a rank that never starts it is
    still caught."""
    named = datetime(2026, 1, 1, tzinfo=UTC)
    assert restarted_at(TorchrunJobStatus()) is None  # nothing named in place: the pods' start
    grace = named + timedelta(seconds=KILL_GRACE_SECONDS)
    asked = TorchrunJobStatus(
        in_place_generation=2, in_place_restart_time=named, in_place_running_generation=1
    )
    assert restarted_at(asked) == grace  # a rank still runs generation 1
    older = dataclasses.replace(asked, in_place_running_time=named - timedelta(seconds=30))
    assert restarted_at(older) == grace  # when generation 1 started says nothing of 2
    ran = dataclasses.replace(
        asked, in_place_running_generation=2, in_place_running_time=named + timedelta(seconds=13)
    )
    assert restarted_at(ran) == named + timedelta(seconds=13)
    soon = dataclasses.replace(ran, in_place_running_time=named + timedelta(seconds=2))
    assert restarted_at(soon) == named + timedelta(seconds=2)  # every rank ran it before the grace
    # the controller assumes the supervisor's grace: the pod never overrides it
    assert KILL_GRACE_SECONDS == torchrun_supervisor.KILL_AFTER


def test_a_synced_generation_is_reloaded_in_place_once_not_counted_as_a_restart() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    status = TorchrunJobStatus(
        workspace_generation=3,
        workspace_sync_time=now,
        in_place_generation=2,
        restarts=1,
        in_place_restarts=1,
    )
    decided = reload_in_place(2, status, now)
    assert (
        decided is not None
        and not decided.stop
        and decided.changes
        == {
            "in_place_generation": 3,
            "in_place_restart_time": now,
            "in_place_workspace_generation": 3,
        }
    )
    asked = TorchrunJobStatus(
        workspace_generation=3, workspace_sync_time=now, in_place_workspace_generation=3
    )
    assert reload_in_place(2, asked, now) is None  # asked once
    assert reload_in_place(3, TorchrunJobStatus(workspace_generation=3, workspace_sync_time=now), now) is None
    assert reload_in_place(0, TorchrunJobStatus(workspace_generation=3), now) is None  # not synced yet


def test_the_running_generation_is_every_ranks_lowest() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    states = {0: Told(State(3, "running", None), now), 1: Told(State(2, "running", None), now)}
    assert running_generation(states, 2) == 2
    assert running_generation(states, 3) is None  # rank 2 said nothing
    states[1] = Told(State(3, "failed", 1), now)
    assert running_generation(states, 2) is None


def test_the_workspace_copy_reads_the_sync_layout_and_rewrites_only_what_changed(tmp_path: Path) -> None:
    ws, code = tmp_path / "ws", tmp_path / "code"
    assert torchrun_workspace.newest(ws) is None
    tree = ws / layout.GENERATIONS / "4"
    (tree / "pkg").mkdir(parents=True)
    (tree / "train.py").write_text("print('v2')\n")
    (tree / "pkg" / "util.py").write_text("X = 1\n")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "link").symlink_to("train.py")
    (ws / layout.CURRENT).write_text("4\n")
    assert torchrun_workspace.newest(ws) is None  # CURRENT alone is not trusted: no marker yet
    (tree / layout.MARKER).write_text("{}")
    assert (torchrun_workspace.CURRENT, torchrun_workspace.GENERATIONS, torchrun_workspace.MARKER) == (
        layout.CURRENT,
        layout.GENERATIONS,
        layout.MARKER,
    )
    assert torchrun_workspace.newest(ws) == (4, tree)
    (code / "old").mkdir(parents=True)
    (code / "old" / "gone.py").write_text("")
    (code / "pkg").mkdir()
    (code / "pkg" / "util.py").write_text("X = 1\n")
    (code / "train.py").write_text("print('v1')\n")
    assert torchrun_workspace.replace_tree(tree, code) == 3  # train.py, run.sh, link; util.py kept
    assert sorted(str(p.relative_to(code)) for p in code.rglob("*")) == [
        "link",
        "pkg",
        "pkg/util.py",
        "run.sh",
        "train.py",
    ]
    assert (code / "train.py").read_text() == "print('v2')\n" and os.readlink(code / "link") == "train.py"
    assert (code / "run.sh").stat().st_mode & 0o777 == 0o755
    assert torchrun_workspace.replace_tree(tree, code) == 0  # nothing changed: nothing written


def test_a_later_generation_copies_the_newest_code_before_torchrun_starts(
    tmp_path: Path, pods: list[Pod]
) -> None:
    ws, code = tmp_path / "ws", tmp_path / "code"
    tree = ws / layout.GENERATIONS / "2"
    tree.mkdir(parents=True)
    (tree / "train.py").write_text("new\n")
    (tree / layout.MARKER).write_text("{}")
    (ws / layout.CURRENT).write_text("2\n")
    code.mkdir()
    (code / "train.py").write_text("old\n")
    pod = Pod(
        tmp_path,
        {"0": "hang", "1": 0},
        extra={"TORCHRUN_WORKSPACE_DIR": str(ws), "TORCHRUN_CODE_DIR": str(code)},
    )
    pods.append(pod)
    wait_until(lambda: pod.told().get("state") == "waiting", timeout=10)
    pod.say(0)
    wait_until(lambda: pod.told().get("state") == "running", timeout=10)
    assert (code / "train.py").read_text() == "old\n"  # generation 0 runs what the pod started with
    pod.say(1)  # a hot reload in place
    wait_until(lambda: pod.told().get("state") == "succeeded", timeout=10)
    pod.say(1, final=True)
    assert pod.wait() == 0
    assert (code / "train.py").read_text() == "new\n"
    assert pod.told()["workspace"] == 2


def test_a_rank_told_by_another_pod_was_replaced_and_makes_one_new_rendezvous() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    states = SupervisorStates()
    for rank in (0, 1):
        states.tell(
            "ns/j", attempt="a", rank=rank, state=State(2, "running", None), now=now, pod=f"old-{rank}"
        )
    assert states.replaced("ns/j", "a") == {}
    assert not states.tell("ns/j", attempt="a", rank=1, state=State(2, "running", None), now=now, pod="old-1")
    # the lost node's pod is recreated: its supervisor waits for its first word
    assert states.tell("ns/j", attempt="a", rank=1, state=State(0, "waiting", None), now=now, pod="new-1")
    assert states.replaced("ns/j", "a") == {1: 2}
    status = TorchrunJobStatus(restarts=1, in_place_restarts=1, in_place_generation=2)
    decided = rejoin(states.replaced("ns/j", "a"), (), status, now)
    assert decided is not None and decided.changes == {"in_place_generation": 3, "in_place_restart_time": now}
    assert "the pod of node rank 1 was replaced" in decided.conditions[0].message  # not a restart
    moved_on = TorchrunJobStatus(in_place_generation=3)
    assert rejoin(states.replaced("ns/j", "a"), (), moved_on, now) is None  # answered once


def pod_made(uid: str, at: datetime) -> dict[str, Any]:
    """A worker pod as the attempt's cache holds it: its UID and when the API created it."""
    return {"metadata": {"uid": uid, "creationTimestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ")}}


def test_after_a_failover_a_rank_waiting_once_every_rank_ran_is_a_replacement() -> None:
    """A new leader has no memory of the old pod: the status says every rank ran the current
    generation, and the waiting rank's pod was created since, so its supervisor came after the
    rendezvous closed."""
    ran_at = datetime(2026, 1, 1, 0, 0, 10, 600000, tzinfo=UTC)
    now = ran_at + timedelta(seconds=30)
    states = {
        0: Told(State(2, "running", None), now, "p0"),
        1: Told(State(0, "waiting", None), now, "new-1"),
    }
    pods = [pod_made("p0", ran_at - timedelta(minutes=5)), pod_made("new-1", ran_at + timedelta(seconds=20))]
    ran = TorchrunJobStatus(
        in_place_generation=2, in_place_running_generation=2, in_place_running_time=ran_at
    )
    decided = rejoin({}, newcomers(states, ran, pods), ran, now)
    assert decided is not None and decided.changes["in_place_generation"] == 3
    assert "the pod of node rank 1 was replaced" in decided.conditions[0].message
    # created in the second every rank ran it (the API dates pods to the second): still new
    same_second = [pods[0], pod_made("new-1", ran_at.replace(microsecond=0))]
    assert newcomers(states, ran, same_second) == [1]
    # not while the ranks are still starting the current generation: at an attempt's start (none
    # ran yet), and after a restart in place (the ranks run the older one until they start it)
    for starting in (
        TorchrunJobStatus(),
        TorchrunJobStatus(in_place_generation=3, in_place_running_generation=2, in_place_running_time=ran_at),
    ):
        assert newcomers(states, starting, pods) == []
        assert rejoin({}, newcomers(states, starting, pods), starting, now) is None


def test_a_pod_that_ran_the_generation_cannot_restart_its_job_uncounted_by_saying_waiting() -> None:
    """The training program can write its supervisor's state file: `waiting` from a pod that
    existed when every rank ran the generation is no replacement, and restarts nothing; nor does
    one from a pod the cache has not seen yet (its event brings the job back)."""
    ran_at = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)
    now = ran_at + timedelta(seconds=30)
    forged = {
        0: Told(State(2, "running", None), now, "p0"),
        1: Told(State(0, "waiting", None), now, "p1"),
    }
    pods = [pod_made("p0", ran_at - timedelta(minutes=5)), pod_made("p1", ran_at - timedelta(minutes=5))]
    ran = TorchrunJobStatus(
        in_place_generation=2, in_place_running_generation=2, in_place_running_time=ran_at
    )
    assert newcomers(forged, ran, pods) == []
    assert rejoin({}, newcomers(forged, ran, pods), ran, now) is None
    assert newcomers(forged, ran, pods[:1]) == []  # p1 not in the cache: not proven new
