"""W4, chaos during a burst: N two-node TorchrunJobs submitted at once, whose kwok workers run
to completion, while the controller is SIGKILLed K times at random moments, kube-apiserver is
restarted once and an etcd compaction forces every watch to 410 Gone; then the verdict
(hack/bench/chaoscheck.py): every job Succeeded exactly once, nothing run or created twice, no
restart counted, no condition gone back, no write from a replica that did not hold the Lease.

    python hack/bench/chaos.py --jobs 1000 --kills 50                # a control plane of its own
    python hack/bench/chaos.py --kubeconfig K --namespace NS --json F  # on a running one (the test)

Two controller replicas run with --leader-elect on one Lease in the run's namespace (shipped
timings 15 / 10 / 2 s unless --lease says otherwise), each with its own identity, which is also
its user agent (`torchrun-controller/<identity>`, controller/cmd/main.py), so the audit log
tells them apart. Each kill waits until a replica leads, waits a random 0.5–`--kill-gap` s more,
SIGKILLs the leader and starts a new replica with a new identity in its place (as a Deployment
would); the standby takes over, so every kill is also a failover, measured from the audit log:
kill → the next replica's first Lease write, and → its first other write. A replica that exits
on its own (it lost the Lease while the API server was away) is started again the same way and
counted.

The compaction, done so that it is what forces the 410s: kube-apiserver is frozen (SIGSTOP) so
nothing moves; two writes straight into etcd (its JSON gateway, the port in the state dir's
ports.env: no etcdctl is built) make its revision R, two past anything the API server's watch
cache has seen; etcd is compacted at R and restarted; kube-apiserver resumes (SIGCONT). Its
cache's watches on etcd have broken and resume below R: etcd answers "required revision has been
compacted", every cache relists and ends all its watchers, and every client watching again from
its last resourceVersion gets 410 "too old resource version". (A compaction alone ends no watch:
etcd's running watches go on; restarting etcd without one lets the caches resume where they
were. Both were tried.) The run counts the 410s its own watch got and the controller's
`relisting` log lines after each disruption.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from auditlog import Window
from burst import IMAGE, job_name, submit
from chaoscheck import KINDS, LEASE, RERUNS, UNRUN, Snapshot, failovers, judge
from common import (
    CONTROLPLANE,
    KCM_DEFAULT,
    KCM_PRODUCTION,
    REPO,
    control_plane,
    install_crds,
    percentile,
    rest_client,
    table,
    torchrunjob,
)
from controllers import torchrun_controller_command

from controller.api.labels import JOB_LABEL
from controller.api.resources import TORCHRUNJOBS, TORCHRUNQUEUES
from controller.rest import ApiError, RESTClient
from controller.rest.resources import JOBS, LEASES, NAMESPACES, PODS, PVCS, SERVICES

NODES = 2  # per job


class StatusRecorder:
    """Every distinct status a watch sees of each TorchrunJob of `ns`, oldest first; relists on
    410 (counted in `gone`), watches again after any other failure. A daemon thread."""

    def __init__(self, rest: RESTClient, ns: str) -> None:
        self.history: dict[str, list[Snapshot]] = {}
        self.gone: list[float] = []  # when each 410 came
        self.all_done: float | None = None
        self._rest, self._ns, self._stop = rest, ns, threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _see(self, job: dict[str, Any]) -> None:
        snap = Snapshot.of(job)
        with self._lock:
            seen = self.history.setdefault(job["metadata"]["name"], [])
            if not seen or seen[-1] != snap:
                seen.append(snap)

    def _list(self) -> str:
        listed = self._rest.list(TORCHRUNJOBS, self._ns)
        for job in listed["items"]:
            self._see(job)
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                rv = rv or self._list()
                for ev in self._rest.watch(TORCHRUNJOBS, self._ns, resource_version=rv, timeout_seconds=300):
                    if ev.type == "ERROR":
                        raise ApiError(int(ev.object.get("code") or 0), str(ev.object.get("message")))
                    rv = ev.object["metadata"].get("resourceVersion", rv)
                    if ev.type in ("ADDED", "MODIFIED"):
                        self._see(ev.object)
            except ApiError as exc:
                if exc.gone:
                    self.gone.append(time.time())
                    rv = ""
                time.sleep(0.5)
            except Exception:  # the API server is away: watch again from where we were
                time.sleep(0.5)

    def when_all_done(self, names: set[str]) -> None:
        """Record in `all_done` the first moment the watch has seen every job in `names` Succeeded
        (a daemon thread)."""

        def poll() -> None:
            while not self._stop.wait(0.5):
                latest = self.latest()
                if all(name in latest and latest[name].done for name in names):
                    self.all_done = time.time()
                    return

        threading.Thread(target=poll, daemon=True).start()

    def latest(self) -> dict[str, Snapshot]:
        with self._lock:
            return {name: seen[-1] for name, seen in self.history.items()}

    def stop(self) -> None:
        self._stop.set()


class Replicas:
    """Two controller replicas electing on one Lease, each started again (new identity) when it
    is killed or exits; `kills` and `exits` record what happened to whom, and when."""

    def __init__(
        self, kubeconfig: Path, ns: str, rest: RESTClient, lease: tuple[float, ...], logs: Path
    ) -> None:
        self.kubeconfig, self.ns, self.rest, self.lease, self.logs = kubeconfig, ns, rest, lease, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.generation: Counter[str] = Counter()
        self.kills: list[tuple[float, str]] = []  # (epoch seconds, identity)
        self.exits: list[tuple[float, str, int]] = []  # replicas that ended on their own
        self._lock = threading.Lock()
        self._stop = threading.Event()
        for slot in ("a", "b"):
            self._start(slot)
        threading.Thread(target=self._supervise, daemon=True).start()

    def _start(self, slot: str) -> None:
        identity = f"{slot}{self.generation[slot]}"
        self.generation[slot] += 1
        command = torchrun_controller_command(self.kubeconfig, self.ns, threadiness=4, qps=50, burst=100)
        command += ["--log-level", "info", "--leader-elect", "--leader-elect-namespace", self.ns]
        command += ["--leader-elect-identity", identity, "--leader-elect-lease-duration", str(self.lease[0])]
        command += ["--leader-elect-renew-deadline", str(self.lease[1])]
        command += ["--leader-elect-retry-period", str(self.lease[2])]
        with (self.logs / f"{identity}.log").open("ab") as out:
            self.procs[identity] = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for identity, proc in list(self.procs.items()):
                    if proc.poll() is not None:
                        self.exits.append((time.time(), identity, proc.returncode))
                        del self.procs[identity]
                        self._start(identity[0])

    def holder(self) -> str:
        try:
            lease = self.rest.get(LEASES, LEASE, self.ns, attempts=1, timeout=5)
        except Exception:
            return ""
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    def wait_leader(self, timeout: float = 180) -> str:
        """The identity of a live replica that holds the Lease, once one does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            who = self.holder()
            with self._lock:
                if who in self.procs and self.procs[who].poll() is None:
                    return who
            time.sleep(0.2)
        raise TimeoutError("no replica took the Lease")

    def kill(self, identity: str) -> bool:
        """SIGKILL `identity` and start a replica in its place; False if it was already gone."""
        with self._lock:
            proc = self.procs.pop(identity, None)
            if proc is None or proc.poll() is not None:
                if proc is not None:
                    self.exits.append((time.time(), identity, proc.returncode or 0))
                    self._start(identity[0])
                return False
            proc.kill()
            self.kills.append((time.time(), identity))
            proc.wait()
            self._start(identity[0])
            return True

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            for proc in self.procs.values():
                proc.terminate()
            for proc in self.procs.values():
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _controlplane(run_dir: Path, step: str, component: str) -> None:
    env = {**os.environ, "TORCHRUN_RUN_DIR": str(run_dir)}
    subprocess.run([str(CONTROLPLANE), step, component], env=env, check=True, stdout=subprocess.DEVNULL)


def restart_apiserver(run_dir: Path) -> None:
    """kube-apiserver stopped and started again: same ports, same etcd data."""
    _controlplane(run_dir, "stop", "kube-apiserver")
    _controlplane(run_dir, "start", "kube-apiserver")


def _etcd(run_dir: Path, call: str, body: dict[str, Any]) -> dict[str, Any]:
    ports = dict(line.split("=", 1) for line in (run_dir / "ports.env").read_text().split())
    req = urllib.request.Request(
        f"http://127.0.0.1:{ports['ETCD_PORT']}/v3/{call}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def compact_etcd(run_dir: Path) -> int:
    """The compaction of the module docstring; its revision."""
    apiserver = int((run_dir / "pids" / "kube-apiserver.pid").read_text())
    os.kill(apiserver, signal.SIGSTOP)
    try:
        key = base64.b64encode(b"/chaos/compaction-marker").decode()
        _etcd(run_dir, "kv/put", {"key": key, "value": key})
        revision = int(_etcd(run_dir, "kv/put", {"key": key, "value": key})["header"]["revision"])
        _etcd(run_dir, "kv/compaction", {"revision": revision, "physical": True})
        # SIGKILL, not `controlplane.sh stop etcd`: etcd's graceful stop waits for the frozen API
        # server's watch streams, 5 s until controlplane.sh kills it anyway (its data is on disk:
        # --unsafe-no-fsync loses only what the machine, not the process, never wrote)
        pidfile = run_dir / "pids" / "etcd.pid"
        etcd = int(pidfile.read_text())
        os.killpg(etcd, signal.SIGKILL)
        while _alive(etcd):
            time.sleep(0.02)
        pidfile.unlink()  # controlplane.sh would take an unreaped etcd for a running one
        _controlplane(run_dir, "start", "etcd")
    finally:
        os.kill(apiserver, signal.SIGCONT)
    return revision


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def relists(logs: Path, since: float, until: float) -> int:
    """The controller replicas' `relisting` log lines (a 410 from a watch) in [since, until)."""
    n = 0
    for path in logs.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if '"relisting"' not in line:
                continue
            try:
                stamp = json.loads(line)["timestamp"].replace("Z", "+00:00")
            except (ValueError, KeyError):
                continue
            if since <= datetime.fromisoformat(stamp).timestamp() < until:
                n += 1
    return n


def chaos_queue(name: str, duration: str) -> dict[str, Any]:
    """A queue whose kwok workers succeed after `duration` (hack/testbed/kwok/stages.yaml)."""
    annotations = {"kwok.torchrun.ai/outcome": "succeed", "kwok.torchrun.ai/duration": duration}
    return {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunQueue",
        "metadata": {"name": name},
        "spec": {"nodeResources": {"gpus": 0}, "image": IMAGE, "podAnnotations": annotations},
    }


def _create(rest: RESTClient, res: Any, body: dict[str, Any], ns: str | None = None) -> None:
    """Create, trying again while the API server is away; one already there is fine."""
    for _ in range(120):
        try:
            rest.create(res, body, ns)
            return
        except ApiError as exc:
            if exc.already_exists:
                return
            if not exc.transient:
                raise
        except Exception:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"could not create {body['metadata']['name']}")


def _writes_settled(window: Window, quiet: float, timeout: float) -> list[dict[str, Any]]:
    """The namespace's writes once none but the Lease's came for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while True:
        writes = window.writes()
        count = sum(1 for e in writes if (e.get("objectRef") or {}).get("resource") != "leases")
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet or time.monotonic() > deadline:
            return writes
        time.sleep(1)


class Chaos:
    """The disruptions of one run, in order: `kills` SIGKILLs of the leader, with the kube-apiserver
    restart a third of the way and the compaction two thirds of the way; what happened when."""

    def __init__(self, run_dir: Path, replicas: Replicas, logs: Path, kill_gap: float, seed: int | None):
        self.run_dir, self.replicas, self.logs, self.kill_gap = run_dir, replicas, logs, kill_gap
        self.rng = random.Random(seed)
        self.moments: dict[str, float] = {}
        self.timeline: list[tuple[float, str]] = []
        self.compaction_revision = 0

    def run(self, kills: int) -> None:
        actions = ["kill"] * kills
        actions.insert(kills // 3, "apiserver")
        actions.insert(2 * (kills + 1) // 3, "compaction")
        for action in actions:
            self.replicas.wait_leader()
            time.sleep(self.rng.uniform(0.5, self.kill_gap))
            if action == "kill":
                # the leader may have lost the Lease meanwhile (and exited): kill the one leading now
                while not self.replicas.kill(self.replicas.wait_leader()):
                    pass
                self.timeline.append((time.time(), f"killed {self.replicas.kills[-1][1]}"))
            else:
                self.disrupt(action)

    def disrupt(self, action: str) -> None:
        self.moments[action] = when = time.time()
        if action == "apiserver":
            restart_apiserver(self.run_dir)
        else:
            self.compaction_revision = compact_etcd(self.run_dir)
        self.timeline.append((when, action))
        # the controller's watches end now and watch again: give them the time to meet the 410
        # before the next kill (they may not: the leader may have lost the Lease meanwhile)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not relists(self.logs, when, time.time() + 1):
            time.sleep(0.5)

    def relists_after(self, action: str, end: float) -> int:
        """The controller's 410 relists from `action` until the next disruption (or `end`)."""
        if action not in self.moments:
            return 0
        start = self.moments[action]
        later = [t for t in self.moments.values() if t > start]
        return relists(self.logs, start, min([*later, end]))


def wait_done(recorder: StatusRecorder, names: set[str], timeout: float) -> None:
    """Return once the watch has seen every job Succeeded, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latest = recorder.latest()
        if all(name in latest and latest[name].done for name in names):
            return
        time.sleep(1)


def children_of(rest: RESTClient, ns: str) -> list[dict[str, Any]]:
    """The namespace's Jobs, Services and claims, each with its kind."""
    kinds = ((JOBS, "Job"), (SERVICES, "Service"), (PVCS, "PersistentVolumeClaim"))
    return [{**o, "kind": kind} for res, kind in kinds for o in rest.list(res, ns)["items"]]


def pod_ends(rest: RESTClient, ns: str, jobs: list[str]) -> list[str]:
    """How each worker pod of `jobs` stands at the end, one line each: its phase, whether it is
    being deleted, its conditions and its container's end (what a failed index's pod says of why)."""
    lines = []
    for job in jobs:
        for pod in rest.list(PODS, ns, label_selector=f"{JOB_LABEL}={job}")["items"]:
            meta, status = pod["metadata"], pod.get("status") or {}
            conds = [
                f"{c['type']}={c['status']}({c.get('reason', '')})" for c in status.get("conditions") or []
            ]
            ends = [
                f"{c['name']}: {term.get('reason')} {term.get('exitCode')}"
                for c in status.get("containerStatuses") or []
                if (term := (c.get("state") or {}).get("terminated"))
            ]
            deleting = f" deleting since {meta['deletionTimestamp']}" if meta.get("deletionTimestamp") else ""
            state = f"{status.get('phase')}{deleting}, {' '.join(conds)}; {'; '.join(ends)}"
            lines.append(f"{job}: pod {meta['name']} {state}")
    return lines


def run(
    kubeconfig: Path,
    ns: str,
    *,
    jobs: int,
    kills: int,
    lease: tuple[float, float, float] = (15.0, 10.0, 2.0),
    kill_gap: float = 6.0,
    duration: str = "5s",
    settle_timeout: float = 900,
    seed: int | None = None,
    logs: Path | None = None,
) -> dict[str, Any]:
    """One chaos run in namespace `ns` (it must exist) of the control plane whose admin kubeconfig
    is `kubeconfig` (its state dir is the kubeconfig's directory); the result as a dict."""
    logs = logs or Path(tempfile.mkdtemp(prefix="chaos-logs-"))
    rest = rest_client(kubeconfig, qps=500, burst=1000, pool_size=32)
    queue = f"chaos-{ns}"
    _create(rest, TORCHRUNQUEUES, chaos_queue(queue, duration))
    window = Window(kubeconfig.parent, ns)
    recorder = StatusRecorder(rest, ns)
    names = {job_name(i) for i in range(jobs)}
    started = time.time()
    replicas = Replicas(kubeconfig, ns, rest, lease, logs)
    chaos = Chaos(kubeconfig.parent, replicas, logs, kill_gap, seed)
    try:
        replicas.wait_leader()
        recorder.when_all_done(names)
        submit(lambda name: _create(rest, TORCHRUNJOBS, torchrunjob(name, queue, NODES), ns), jobs)
        chaos.run(kills)
        chaos_done = time.time()
        wait_done(recorder, names, settle_timeout)
        writes = _writes_settled(window, quiet=5, timeout=120)
        finished = time.time()
        final = rest.list(TORCHRUNJOBS, ns)["items"]
        children = children_of(rest, ns)
        failed = sorted(
            j["metadata"]["name"] for j in final if (j.get("status") or {}).get("phase") == "Failed"
        )
        ends = pod_ends(rest, ns, failed)
    finally:
        replicas.stop()
        recorder.stop()
        with contextlib.suppress(Exception):  # the run's verdict matters more than a leftover queue
            rest.delete(TORCHRUNQUEUES, queue)
    verdict = judge(
        names, NODES, writes, recorder.history, final, children, {who: t for t, who in replicas.kills}
    )
    overs = failovers(writes, replicas.kills)
    firsts = [f for _, f in overs if f is not None]
    since = chaos.moments.get("compaction", float("inf"))
    return {
        "jobs": jobs,
        "kills": len(replicas.kills),
        "apiserver_restarts": int("apiserver" in chaos.moments),
        "compactions": int("compaction" in chaos.moments),
        "compaction_revision": chaos.compaction_revision,
        "exits": [(round(t - started, 1), who, code) for t, who, code in replicas.exits],
        "violations": dict(verdict.counts),
        "violation_total": verdict.total,
        "details": verdict.details[:200],
        "seen": dict(verdict.seen),
        "notes": verdict.notes[:200],
        "trails": (verdict.trails + ends)[:200],
        "failover_lease_s": [round(t, 2) for t, _ in overs],
        "failover_first_write_s": [round(t, 2) for t in firsts],
        "failover_p50_s": round(percentile(firsts, 50), 2) if firsts else None,
        "failover_max_s": round(max(firsts), 2) if firsts else None,
        "deposed_writes": verdict.counts["non-leader-writes"],
        "recorder_410s": len(recorder.gone),
        "recorder_410s_after_compaction": sum(1 for t in recorder.gone if t >= since),
        "controller_410_relists_after_apiserver": chaos.relists_after("apiserver", chaos_done + 60),
        "controller_410_relists_after_compaction": chaos.relists_after("compaction", chaos_done + 60),
        "chaos_s": round(chaos_done - started, 1),
        "wall_s": round(finished - started, 1),
        "logs": str(logs),
        "timeline": sorted(
            [(round(t - started, 1), what) for t, what in chaos.timeline]
            + [(round(t - started, 1), f"{who} exited ({code})") for t, who, code in replicas.exits]
            + [(round(t - started, 1), "every job Succeeded") for t in [recorder.all_done] if t is not None]
        ),
        "all_done_s": None if recorder.all_done is None else round(recorder.all_done - started, 1),
    }


def result_table(result: dict[str, Any], kcm: tuple[int, int] | None) -> str:
    """The run's figures as a table, then its first details and notes, one per line."""
    v = result["violations"]
    after = (result["recorder_410s_after_compaction"], result["controller_410_relists_after_compaction"])
    firsts = (result["failover_p50_s"], result["failover_max_s"])
    relisted = result["controller_410_relists_after_apiserver"]
    done, wall = result.get("all_done_s"), result["wall_s"]
    rows: list[list[object]] = [
        ["kube-controller-manager client", f"{kcm[0]} / {kcm[1]}" if kcm else "as running"],
        ["jobs (2 nodes each)", result["jobs"]],
        ["controller SIGKILLs (each a failover)", result["kills"]],
        ["replicas that exited on their own (restarted)", len(result["exits"])],
        ["kube-apiserver restarts", result["apiserver_restarts"]],
        ["etcd compactions (every watch → 410)", result["compactions"]],
        ["  410s after it: our watch's / the controller's relists", f"{after[0]} / {after[1]}"],
        ["controller relists on 410 after the API server restart", relisted],
        *[[f"violations: {kind}", v.get(kind, 0)] for kind in KINDS],
        ["violations in all (target 0)", result["violation_total"]],
        [f"not ours: {RERUNS}", result["seen"].get(RERUNS, 0)],
        [f"not ours: {UNRUN}", result["seen"].get(UNRUN, 0)],
        ["failover s, kill → new leader's first write (p50 / max)", f"{firsts[0]} / {firsts[1]}"],
        ["failover s, kill → Lease taken (p50 / max)", _p50_max(result["failover_lease_s"])],
        ["writes by a deposed leader (target 0)", result["deposed_writes"]],
        ["s until every job Succeeded / chaos done / wall", f"{done} / {result['chaos_s']} / {wall}"],
    ]  # fmt: skip
    lines = [*result["details"][:30], *result["notes"][:10], *result.get("trails", [])[:60]]
    return "\n".join([table(["W4 chaos", "value"], rows), *lines])


def _p50_max(values: list[float]) -> str:
    return f"{percentile(values, 50):.2f} / {max(values):.2f}" if values else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--kcm", default="default", help="kube-controller-manager client: default | production")
    ap.add_argument("--lease", default="15,10,2", help="lease duration, renew deadline, retry period (s)")
    ap.add_argument("--kill-gap", type=float, default=6.0, help="a kill comes 0.5–this many s after a take")
    ap.add_argument("--duration", default="5s", help="how long each worker pod runs (kwok)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument(
        "--settle-timeout", type=float, default=900, help="s to wait for every job after the chaos"
    )
    ap.add_argument("--kubeconfig", type=Path, help="use this running control plane (its state dir)")
    ap.add_argument("--namespace", help="with --kubeconfig: an existing namespace to run in")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--logs", type=Path, help="directory for the replicas' logs")
    args = ap.parse_args()
    lease = tuple(float(x) for x in args.lease.split(","))
    kwargs: dict[str, Any] = {
        "jobs": args.jobs, "kills": args.kills, "lease": lease, "kill_gap": args.kill_gap,
        "duration": args.duration, "seed": args.seed, "logs": args.logs,
        "settle_timeout": args.settle_timeout,
    }  # fmt: skip
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    kcm = None
    if args.kubeconfig:
        result = run(args.kubeconfig.resolve(), args.namespace, **kwargs)
    else:
        kcm = KCM_DEFAULT if args.kcm == "default" else KCM_PRODUCTION
        result = on_own_plane(kcm, **kwargs)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(result_table(result, kcm))
    sys.exit(1 if result["violation_total"] else 0)


def on_own_plane(kcm: tuple[int, int], **kwargs: Any) -> dict[str, Any]:
    """W4 on a control plane of its own (4 kwok nodes, kube-controller-manager's client at `kcm`),
    in namespace `chaos`; `kwargs` are run()'s. The run's result, violations included."""
    with control_plane(nodes=4, pods_per_node=2 * kwargs["jobs"] + 10, kcm=kcm) as kubeconfig:
        install_crds(kubeconfig, REPO / "crd")
        rest = rest_client(kubeconfig)
        rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "chaos"}})
        return run(kubeconfig, "chaos", **kwargs)


if __name__ == "__main__":
    main()
