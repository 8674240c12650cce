"""The in-place restart supervisor: torchrun's parent in a worker pod (docs/design/recovery.md).

`launch` runs `python torchrun_supervisor.py torchrun <args>` instead of `exec`ing torchrun when
the job restarts in place (`TORCHRUN_IN_PLACE=1`, set by the controller with
`failurePolicy.restartMode: InPlace`); otherwise it is never started. Standard library only at
import time (torch only on node rank 0, to host the rendezvous store: below). What it guarantees:

- **One generation at a time.** Every torchrun it starts runs generation G of the attempt: a fresh
  torchrun, its rendezvous id `<id>` for G = 0 and `<id>-<G>` after, and `TORCHRUN_IN_PLACE_GENERATION=G`
  in its environment (the checkpoint helper and the framework hooks rescan the checkpoint root
  when G > 0: `torchrun_checkpoint.resume_from`). G comes from the controller only: the reporter
  sidecar writes the controller's word to `TORCHRUN_CONTROL_FILE` (`{"generation": G, "final":
  bool}`) and the supervisor reads it; a fresh pod waits for the first word before its first
  start (so a pod that replaced another joins the generation the others are in).
- **It tells what happened.** `TORCHRUN_SUPERVISOR_FILE` (in the progress volume, read by the
  sidecar) holds `{"generation": G, "state": "waiting"|"running"|"failed"|"succeeded",
  "exitCode": C}`, replaced whole (write, then rename).
- **A rank is done when every rank is.** torchrun exiting 0 is told `succeeded`, and the container
  ends with 0 once the controller's word says `final` (every rank of the generation succeeded, or
  the attempt is over) or no word comes within `TORCHRUN_DECISION_SECONDS`. A newer generation
  named meanwhile is started instead: a program that stops every rank when one is stopped (a
  save on SIGTERM) exits 0 on the ranks whose peer's pod was evicted, and those ranks must
  restart with the replacement, not end their index of the worker Job as done.
- **A failure waits for the controller.** An exit
  code in `TORCHRUN_PERMANENT_EXIT_CODES` ends it with that code at once (the worker Job's
  podFailurePolicy fails the job, as without the supervisor). Any other code is reported
  `failed` and the supervisor waits for the controller: a newer generation restarts torchrun;
  `final` (no in-place restart left) or no word within `TORCHRUN_DECISION_SECONDS` (120) ends the
  container with the code, and the recreate path takes over.
- **A newer generation restarts what runs.** When the word names a generation above the one
  running (another pod failed, a stall, a hot reload), torchrun gets SIGTERM (it stops its
  workers), SIGKILL after `TORCHRUN_KILL_AFTER_SECONDS` (10), and then every process left under the supervisor
  (it is their child subreaper, so none escapes by daemonizing) gets SIGKILL, before the next
  torchrun starts.
- **A later generation runs the newest code.** Before it starts generation G > 0, the supervisor
  copies the newest published workspace generation (`TORCHRUN_WORKSPACE_DIR`, the workspace PVC
  read-only) into the code directory (`TORCHRUN_CODE_DIR`) when it is not the one it copied last
  (`torchrun_workspace.py`): a hot reload in place is a new generation. The state then says which
  workspace generation runs (`"workspace": W`).
- **The pod's stop is torchrun's, and a stopped pod is never done.** SIGTERM to the supervisor is
  forwarded to torchrun, and the container ends with torchrun's code — 143 when that is 0: a
  program that saves on SIGTERM and exits 0 would otherwise end an evicted pod (a drain, a lost
  node) Succeeded, and the worker Job would count its rank done instead of replacing it.
- **The next torchrun is started ahead.** Each torchrun after the first comes from a standby
  (`torchrun_standby.py`) the supervisor started while the previous generation ran — the same
  interpreter (the script's `#!` python), the script and its arguments, the generation's exact
  environment — with torchrun's own modules already imported (torch: seconds), so a restart or a
  hot reload waits only for the workers' start. The first standby starts with the supervisor
  (it warms up while the pod waits for its first word); each next one when a generation starts,
  warming up `TORCHRUN_STANDBY_DELAY_SECONDS` (10) later, after that generation's workers imported
  torch (a warm-up beside them slowed them in a container with a CPU limit). Used
  only when torchrun is a Python script (`TORCHRUN_STANDBY=0`: never); a standby that died is
  replaced by a plain start. It is the one process under the supervisor that a stop spares (not
  what runs under it).
- **The store outlives torchrun.** On node rank 0 with the c10d rendezvous, the supervisor hosts
  the rendezvous' TCPStore on the rendezvous port itself (torch's c10d backend then connects to
  it as a client: `_create_tcp_store` falls back when the port is taken), so a restarted torchrun
  on another node never reaches a store that is about to die with the old torchrun; each
  generation's keys live under its own rendezvous id. If torch cannot host it, torchrun does, as
  before (said on stderr).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

ENV_ON = "TORCHRUN_IN_PLACE"
ENV_GENERATION = "TORCHRUN_IN_PLACE_GENERATION"
ENV_CONTROL = "TORCHRUN_CONTROL_FILE"
ENV_STATE = "TORCHRUN_SUPERVISOR_FILE"
ENV_PERMANENT = "TORCHRUN_PERMANENT_EXIT_CODES"
ENV_DECISION = "TORCHRUN_DECISION_SECONDS"
ENV_KILL_AFTER = "TORCHRUN_KILL_AFTER_SECONDS"
ENV_WORKSPACE_DIR = "TORCHRUN_WORKSPACE_DIR"
ENV_CODE_DIR = "TORCHRUN_CODE_DIR"
ENV_STANDBY = "TORCHRUN_STANDBY"
ENV_STANDBY_DELAY = "TORCHRUN_STANDBY_DELAY_SECONDS"
DEFAULT_CONTROL = "/var/run/torchrun-control/generation.json"
DEFAULT_STATE = "/var/run/torchrun-progress/supervisor.json"
POLL = 0.1
KILL_AFTER = 10.0
DECISION_SECONDS = 120.0
STANDBY_DELAY = 10.0
STANDBY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_standby.py")
PR_SET_CHILD_SUBREAPER = 36
# this directory's workspace copier (the supervisor runs as a script from it, so it is on sys.path)
torchrun_workspace: Any = importlib.import_module("torchrun_workspace")


class Word:
    """The controller's latest word as the sidecar wrote it: a generation and whether failures
    may still restart in place (`final`: no)."""

    def __init__(self, generation: int, final: bool) -> None:
        self.generation, self.final = generation, final


def read_word(path: str) -> Word | None:
    """The control file's word, or None while there is none (or it is being replaced)."""
    try:
        with open(path) as f:
            data = json.load(f)
        generation = data["generation"]
        if not isinstance(generation, int) or generation < 0:
            return None
        return Word(generation, bool(data.get("final")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(
    path: str, generation: int, state: str, exit_code: int | None = None, workspace: int | None = None
) -> None:
    """Replace the state file whole (module doc); a failure to write is said, never raised."""
    body = {"generation": generation, "state": state, "exitCode": exit_code, "pid": os.getpid()}
    if workspace is not None:
        body["workspace"] = workspace
    try:
        fd, tmp = tempfile.mkstemp(prefix=".supervisor-", dir=os.path.dirname(path) or ".")
        with os.fdopen(fd, "w") as out:
            json.dump(body, out)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        _say(f"cannot write {path}: {exc}")


def with_generation(args: list[str], generation: int) -> list[str]:
    """torchrun's arguments with the rendezvous id of `generation` (module doc); the first
    `--rdzv_id`/`--rdzv-id` is the one changed, in either spelling (`=` or a separate value)."""
    if generation == 0:
        return list(args)
    out = list(args)
    for i, arg in enumerate(out):
        for flag in ("--rdzv_id", "--rdzv-id"):
            if arg.startswith(flag + "="):
                out[i] = f"{arg}-{generation}"
                return out
            if arg == flag and i + 1 < len(out):
                out[i + 1] = f"{out[i + 1]}-{generation}"
                return out
    return out


def _rdzv(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        for flag in (f"--{name}", f"--{name.replace('_', '-')}"):
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
    return None


def host_store(args: list[str], env: dict[str, str]) -> Any:
    """On node rank 0 with the c10d rendezvous, a TCPStore on the rendezvous port (module doc);
    None elsewhere or when torch cannot host it."""
    backend = _rdzv(args, "rdzv_backend") or env.get("PET_RDZV_BACKEND", "")
    endpoint = _rdzv(args, "rdzv_endpoint") or env.get("PET_RDZV_ENDPOINT", "")
    if env.get("PET_NODE_RANK", env.get("JOB_COMPLETION_INDEX")) != "0" or backend != "c10d":
        return None
    host, _, port = endpoint.rpartition(":")
    if not port.isdigit():
        return None
    try:
        dist: Any = importlib.import_module("torch.distributed")  # torch only here, on node rank 0
        return dist.TCPStore(
            host,
            int(port),
            is_master=True,
            wait_for_workers=False,
            multi_tenant=True,
            timeout=timedelta(seconds=60),
        )
    except Exception as exc:
        _say(f"cannot host the rendezvous store on port {port} ({exc}); torchrun will")
        return None


def python_script(argv: list[str], env: dict[str, str]) -> tuple[str, str, list[str]] | None:
    """How the kernel would run `argv` (`torchrun <args>`, or `<python> <script> <args>`) when it
    is a Python script: its interpreter, the script as Python's `sys.argv[0]` would name it, and
    the script's arguments; None when it is not one, or its `#!` line passes the interpreter
    options (which a standby could not honour)."""
    path = env.get("PATH", os.defpath)
    if not argv:
        return None
    if os.path.basename(argv[0]).startswith("python"):
        interpreter = shutil.which(argv[0], path=path)
        if interpreter and len(argv) > 1 and not argv[1].startswith("-") and os.path.isfile(argv[1]):
            return interpreter, argv[1], argv[2:]
        return None
    script = shutil.which(argv[0], path=path)
    if script is None:
        return None
    try:
        with open(script, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if len(words) == 2 and os.path.basename(words[0]) == "env":
        words = [shutil.which(words[1], path=path) or ""]
    if len(words) != 1 or not os.path.basename(words[0]).startswith("python"):
        return None
    return words[0], script, argv[1:]


class Standby:
    """One `torchrun_standby.py` process for `script` (run by `interpreter` with `args`, generation
    0's: `python_script`): started with `env`, it warms up after `delay` seconds and runs the script
    when `launch` gives it a generation's arguments and environment (its module doc)."""

    def __init__(
        self, interpreter: str, script: str, args: list[str], env: dict[str, str], delay: float
    ) -> None:
        self.args = args
        read, self.order = os.pipe()
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                [interpreter, STANDBY, str(read), f"{delay:g}", script], env=env, pass_fds=(read,)
            )
        except OSError:
            os.close(self.order)
            raise
        finally:
            os.close(read)

    def launch(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes] | None:
        """The standby, now running the script with `args` and `env`; None when it died."""
        if self.proc.poll() is not None:
            self.discard()
            return None
        try:
            os.write(self.order, (json.dumps({"args": args, "env": env}) + "\n").encode())
        except OSError:
            self.discard()
            return None
        os.close(self.order)
        self.order = -1
        return self.proc

    def discard(self) -> None:
        """End it (it ran nothing) and collect it."""
        if self.order >= 0:
            with contextlib.suppress(OSError):
                os.close(self.order)
            self.order = -1
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()


class Supervisor:
    """The loop of the module doc; `argv` is torchrun's command line (`torchrun <args>`)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.argv, self.env = argv, env
        self.control = env.get(ENV_CONTROL) or DEFAULT_CONTROL
        self.state = env.get(ENV_STATE) or DEFAULT_STATE
        codes = (env.get(ENV_PERMANENT) or "").replace(",", " ").split()
        self.permanent = {int(c) for c in codes if c.isdigit()}
        self.decision = float(env.get(ENV_DECISION) or DECISION_SECONDS)
        self.kill_after = float(env.get(ENV_KILL_AFTER) or KILL_AFTER)
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None
        self.workspace = env.get(ENV_WORKSPACE_DIR) or ""  # the workspace PVC, read-only
        self.code = env.get(ENV_CODE_DIR) or ""  # where the init container copied the code
        self.code_generation: int | None = None  # the workspace generation last copied (None: unknown)
        self.script = python_script(argv, env) if env.get(ENV_STANDBY) != "0" else None
        self.standby_delay = float(env.get(ENV_STANDBY_DELAY) or STANDBY_DELAY)
        self.standby: Standby | None = None

    def tell(self, generation: int, state: str, exit_code: int | None = None) -> None:
        """The state file says `state` of `generation`, with the workspace generation copied last."""
        write_state(self.state, generation, state, exit_code, self.code_generation)

    def on_term(self, signum: int, frame: object) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(OSError):
                self.child.send_signal(signal.SIGTERM)

    def first_word(self) -> Word | None:
        """Wait for the controller's word (module doc); None when the pod is stopped first."""
        self.tell(0, "waiting")
        said = time.monotonic()
        while not self.stopping:
            word = read_word(self.control)
            if word is not None:
                return word
            if time.monotonic() - said > 30:
                _say("still waiting for the controller's word (the reporter sidecar writes it)")
                said = time.monotonic()
            time.sleep(POLL)
        return None

    def refresh_code(self) -> None:
        """Before a later generation: the newest published workspace generation into the code
        directory, when it is not the one copied last (`torchrun_workspace`; a hot reload in
        place). A failure is said; torchrun then runs the code the pod has."""
        if not (self.workspace and self.code):
            return
        try:
            found = torchrun_workspace.newest(self.workspace)
            if found is None or found[0] == self.code_generation:
                return
            written = torchrun_workspace.replace_tree(found[1], self.code)
            self.code_generation = found[0]
            _say(f"workspace generation {found[0]} copied to {self.code} ({written} entries written)")
        except OSError as exc:
            _say(f"cannot copy the newest workspace generation to {self.code}: {exc}")

    def prepare_standby(self, delay: float) -> None:
        """A standby for the next start, when torchrun is a Python script and none waits."""
        if self.script is None or self.standby is not None:
            return
        try:
            self.standby = Standby(*self.script, self.env, delay)
        except OSError as exc:
            _say(f"cannot start a standby torchrun ({exc}): each generation starts afresh")
            self.script = None

    def start(self, generation: int) -> subprocess.Popen[bytes]:
        """Generation `generation`'s torchrun (module doc): from the standby when one waits,
        otherwise started here; then the next standby."""
        if generation > 0:
            self.refresh_code()
        env = dict(self.env)
        env[ENV_GENERATION] = str(generation)
        argv = [self.argv[0], *with_generation(self.argv[1:], generation)]
        _say(f"generation {generation}: starting {' '.join(argv[:1] + argv[1:8])} ...")
        child = None
        if self.standby is not None:
            child = self.standby.launch(with_generation(self.standby.args, generation), env)
            self.standby = None
        if child is None:
            child = subprocess.Popen(argv, env=env)
        self.tell(generation, "running")
        self.prepare_standby(self.standby_delay)
        return child

    def close(self) -> None:
        """The standby, if one waits, ended: the supervisor is about to exit."""
        if self.standby is not None:
            self.standby.discard()
            self.standby = None

    def spared(self) -> int | None:
        return self.standby.proc.pid if self.standby is not None else None

    def stop_child(self, child: subprocess.Popen[bytes]) -> None:
        """SIGTERM, SIGKILL after `kill_after` seconds, then SIGKILL to every process left under us."""
        with contextlib.suppress(OSError):
            child.send_signal(signal.SIGTERM)
        try:
            child.wait(self.kill_after)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                child.kill()
            child.wait()
        kill_descendants(self.spared())

    def run(self) -> int:
        word = self.first_word()
        if word is None:
            return 143
        if word.final:  # this pod's attempt is over (a whole-job restart replaced it, or the job ended)
            _say("the controller says this attempt is over: torchrun is not started")
            return 143
        generation = word.generation
        while True:
            self.child = child = self.start(generation)
            newer = None
            while (code := child.poll()) is None:
                word = read_word(self.control)
                if not self.stopping and word is not None and word.generation > generation:
                    newer = word.generation
                    _say(f"generation {newer} asked: stopping generation {generation}")
                    self.stop_child(child)
                    break
                time.sleep(POLL)
            reap()
            if newer is not None:
                generation = newer
                continue
            assert code is not None
            if self.stopping:  # the pod is stopped: never done (module doc)
                self.tell(generation, "stopped", code)
                return 143 if code == 0 else (code if code > 0 else 128 - code)
            if code == 0:  # done, unless another rank's pod was replaced meanwhile (module doc)
                self.tell(generation, "succeeded", code)
                chosen = self.await_decision(generation, succeeded=True)
                if chosen is None:
                    return 0
                generation = chosen
                continue
            code = code if code > 0 else 128 - code
            kill_descendants(self.spared())
            if code in self.permanent:
                self.tell(generation, "failed", code)
                _say(f"torchrun exited {code}, a permanent exit code: the pod fails")
                return code
            self.tell(generation, "failed", code)
            _say(f"torchrun exited {code} in generation {generation}: waiting for the controller")
            chosen = self.await_decision(generation)
            if chosen is None:
                return code
            generation = chosen

    def await_decision(self, generation: int, succeeded: bool = False) -> int | None:
        """After torchrun ended `generation` (failed, or `succeeded`): the generation to run next,
        or None to end the container."""
        deadline = time.monotonic() + self.decision
        while not self.stopping and time.monotonic() < deadline:
            word = read_word(self.control)
            if word is not None and word.generation > generation:
                if succeeded:
                    _say(f"generation {word.generation} asked after this rank finished: starting it")
                return word.generation
            if word is not None and word.final:
                if not succeeded:
                    _say("the controller restarts no more in place: the pod fails")
                return None
            time.sleep(POLL)
        if not self.stopping:
            outcome = "the pod ends as done" if succeeded else "the pod fails"
            _say(f"no word from the controller in {self.decision:.0f}s: {outcome}")
        return None


def reap() -> None:
    """Collect every exited child (as a subreaper, orphans are ours to wait for)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _children_by_parent() -> dict[int, list[int]]:
    """Every process's children, from one read of /proc. A zombie stays in: its threads may still
    be tearing down (a thread group's leader shows `Z` while the others exit) and hold what the
    next torchrun needs, such as its store's port; reaped, it is gone."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def kill_descendants(spared: int | None = None) -> None:
    """SIGKILL every process under the supervisor but `spared` (the standby; whatever runs under
    it is killed too: a standby has nothing under it, unless a program ordered it to run
    something), until none is left (bounded: 5 s)."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        children = _children_by_parent()
        pending, seen = [os.getpid()], []
        while pending:
            for child in children.get(pending.pop(), []):
                pending.append(child)
                if child != spared:
                    seen.append(child)
        if not seen:
            return
        for pid in seen:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        reap()


def _subreaper() -> None:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _say(message: str) -> None:
    print(f"torchrun-supervisor: {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if not argv:
        _say("usage: torchrun_supervisor.py torchrun <args>")
        return 2
    env = dict(os.environ)
    if env.get(ENV_ON) != "1":
        os.execvp(argv[0], argv)
    _subreaper()
    supervisor = Supervisor(argv, env)
    signal.signal(signal.SIGTERM, supervisor.on_term)
    supervisor.prepare_standby(0.0)  # imports beside the store's own import of torch
    store = host_store(argv[1:], env)
    try:
        return supervisor.run()
    finally:
        supervisor.close()
        del store


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
