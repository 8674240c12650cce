"""Worker logs per rank: printed once, or followed across pod replacements until the job ends.

A worker pod is one node of the job; its rank is the Indexed Job's completion index. Following
attaches one streaming log request per pod (a thread each, lines joined through a queue so they
interleave as they arrive, prefixed `[rank N]` when several ranks are shown). Every `refresh`
seconds it lists the job's worker pods and attaches to new ones, so a whole-job restart, which
replaces every pod, is followed without the user doing anything. A pod is attached at most once
(by uid) after its log opened, so no line is printed twice. A log stream may never end by
itself (kubelet keeps it open, or a node is lost), so following stops once the job is in a
terminal phase and its streams have gone quiet for `grace` seconds. While the job is held up
(a condition of its progress is not True: workers unschedulable, restarting), the follower says
so on the status stream, one line per change, as `wait` does.

`--previous` is the rank's previous *pod*, not a restarted container: worker pods run with
`restartPolicy: Never`, so a kubelet never restarts a worker's container and never keeps a
previous container log. What a rank leaves behind is a pod: when a worker fails with a retriable
exit code the worker Job keeps the failed pod and creates a new one for the same rank, and
`previous_pods` picks, per rank, the pod before the newest.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from controller.api.labels import WORKER_ROLE
from controller.plugin.errors import PluginError, api_error_line
from controller.plugin.kube import Kube
from controller.plugin.objects import JSON, get_job, job_pods
from controller.plugin.watch import TERMINAL, Announcer, held_up, phase
from controller.pods import COMPLETION_INDEX_ANNOTATION
from controller.rest.errors import ApiError
from controller.rest.resources import PODS

WORKER_CONTAINER = "torchrun"


def rank_of(pod: JSON) -> int | None:
    """The node rank of a worker pod: its completion index (annotation, or label on newer
    Kubernetes); None if it has none."""
    meta = pod.get("metadata") or {}
    key = COMPLETION_INDEX_ANNOTATION
    value = (meta.get("annotations") or {}).get(key) or (meta.get("labels") or {}).get(key)
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def prefixed(rank: int | None, line: str, prefix: bool) -> str:
    """`line` as printed: with `[rank N] ` in front when several ranks share the output."""
    return f"[rank {'?' if rank is None else rank}] {line}" if prefix else line


def _open_log(kube: Kube, pod: JSON, follow: bool) -> Iterator[bytes]:
    params = {"container": WORKER_CONTAINER}
    params.update({"follow": "true"} if follow else {})
    return kube.open_lines(PODS, pod["metadata"]["name"], "log", params)


def selected(pods: Iterable[JSON], ranks: set[int] | None) -> list[tuple[int | None, JSON]]:
    """The pods of the chosen ranks (all when `ranks` is None), by rank then creation time."""
    out = [(rank_of(p), p) for p in pods]
    out = [(r, p) for r, p in out if ranks is None or r in ranks]
    return sorted(
        out, key=lambda rp: (-1 if rp[0] is None else rp[0], rp[1]["metadata"].get("creationTimestamp", ""))
    )


def previous_pods(pods: Sequence[tuple[int | None, JSON]]) -> list[tuple[int | None, JSON]]:
    """Of `selected` pods, each rank's pod before its newest; ranks with one pod have none."""
    by_rank: dict[int | None, list[JSON]] = {}
    for rank, pod in pods:
        by_rank.setdefault(rank, []).append(pod)
    return [(rank, ps[-2]) for rank, ps in by_rank.items() if len(ps) > 1]


def _which(ranks: set[int] | None) -> str:
    return "any rank" if ranks is None else "rank " + ",".join(map(str, sorted(ranks)))


def print_logs(
    kube: Kube, job: str, ranks: set[int] | None, prefix: bool, previous: bool, out: Callable[[str], None]
) -> None:
    """Print the logs of the chosen ranks' pods once, rank by rank (`previous`: of each rank's
    previous pod, see the module docstring)."""
    pods = selected(job_pods(kube, job, WORKER_ROLE), ranks)
    if not pods:
        raise PluginError(
            f"job {job} has no worker pod for {_which(ranks)} now (phase {phase(get_job(kube, job))})"
        )
    if previous:
        pods = previous_pods(pods)
        if not pods:
            raise PluginError(
                f"job {job} has no previous worker pod for {_which(ranks)}: a rank keeps its previous pod "
                "only when that pod failed with a retriable exit code and was replaced"
            )
    for rank, pod in pods:
        try:
            for line in _open_log(kube, pod, False):
                out(prefixed(rank, line.decode("utf-8", "replace").rstrip("\n"), prefix))
        except ApiError as exc:
            out(prefixed(rank, f"(no log: {api_error_line(exc)})", True))


class LogFollower:
    """Follows the chosen ranks of one job; see the module docstring."""

    def __init__(
        self,
        kube: Kube,
        job: str,
        ranks: set[int] | None,
        prefix: bool,
        out: Callable[[str], None],
        say: Callable[[str], None] | None = None,
        refresh: float = 2.0,
        grace: float = 3.0,
    ) -> None:
        self.kube, self.job, self.ranks, self.prefix, self.out = kube, job, ranks, prefix, out
        self.announce = Announcer(say) if say is not None else None
        self.refresh, self.grace = refresh, grace
        self._lines: queue.Queue[tuple[int | None, str]] = queue.Queue()
        self._attached: set[str] = set()
        self._threads: list[threading.Thread] = []

    def _stream(self, rank: int | None, lines: Iterator[bytes]) -> None:
        for line in lines:
            self._lines.put((rank, line.decode("utf-8", "replace").rstrip("\n")))

    def _attach_new(self) -> None:
        for rank, pod in selected(job_pods(self.kube, self.job, WORKER_ROLE), self.ranks):
            uid = pod["metadata"]["uid"]
            if uid in self._attached or (pod.get("status") or {}).get("phase") == "Pending":
                continue
            try:
                lines = _open_log(self.kube, pod, True)
            except ApiError:
                continue  # not started yet, or gone: the next refresh tries again
            self._attached.add(uid)
            thread = threading.Thread(target=self._stream, args=(rank, lines), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _print_pending(self, timeout: float) -> bool:
        """Print what arrived within `timeout`; whether anything did."""
        printed = False
        deadline = time.monotonic() + timeout
        while True:
            try:
                rank, line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return printed
            self.out(prefixed(rank, line, self.prefix))
            printed = True

    def follow(self) -> JSON:
        """Print lines until the job is terminal and its streams are quiet; the final job."""
        while True:
            job = get_job(self.kube, self.job)
            if phase(job) in TERMINAL:
                self._attach_new()  # pods that ran and ended between two refreshes
                while self._print_pending(self.grace if any(t.is_alive() for t in self._threads) else 0.0):
                    pass
                return job
            self._say_held_up(job)
            self._attach_new()
            self._print_pending(self.refresh)

    def _say_held_up(self, job: JSON) -> None:
        if self.announce is None:
            return
        reason = held_up(job)
        if reason is None:
            self.announce.clear()
        else:
            self.announce(reason)
