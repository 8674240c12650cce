"""The TorchrunJob reconciler: level-based, idempotent, one key at a time (`syncHandler`).

`reconcile(key)` reads the job from the lister and runs `sync`, a list of steps that each answer
`Proceed(value, decision)` or a `Decision` that ends the pass (`steps.py`; `take` records each
answer and carries out its actions): a finished job gets only `lifecycle.finished` (etcd, workers
or a sync still at work, autoclean, TTL); else `admit` (queue Ready, job valid → topology),
`lifecycle.deadline`, the workspace `claims` (`claims.py`) and the code `generation` synced
(`generations.py`), the headless `service`, the managed `etcd` of etcd-v2 rendezvous
(`managed_etcd.py`), the `gang` (`podgroups.py`), the `workers` of the current attempt
(`workers.py`: the worker Job and its pods, listed once), and `observe`, whose answer is the
attempt's state as conditions — suspended, running or why not (`starting.py`; `reload.py`: hot
reload rolls workers made before the generation in use; `progress.py`: status.progress,
Progressing, a stall), restarted in place after a failure its supervisors told (`inplace.py`,
for a job that restarts in place), started again at once after a disrupted rank
(`disruption.py`, for one that recreates its pods), or ended (`lifecycle.attempt_ended`).
No step writes the status: it is computed from what the steps answered and written once, **on
every path** — an exception's too, which then still propagates so the key is retried with backoff
(`reporter.py`: only when it changed; transitions become Events) — but a write that would
change only the worker counts (and the messages that quote them) waits up to `COUNTS_BATCH`
seconds for more, so pods starting together cost a write per batch, not one per count. Timers come back as
`Result(requeue_after=...)`, a wait no event announces (a name conflict) as a rate-limited
`Result(requeue=True)`; nothing is requeued at once after our own writes (their watch events bring
the key back); a pass that finds the cached job still at the version our last status write
replaced (a child's event came first) ends at once: it would decide on a status we replaced and
conflict with our own write. A status that is written carries `status.goodput` folded forward
(`goodput.py`, from the attempt's newest step observation: `ProgressStep.point`). Invalid specs
become a condition and are not retried.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from typing import Any, TypeVar

import structlog

from controller.api import InvalidObjectError, TorchrunJob, TorchrunJobStatus, find_condition
from controller.api import JobConditionType as C
from controller.api.labels import annotated_generation
from controller.api.reasons import Reason
from controller.api.resources import TORCHRUNJOBS
from controller.cache import Lister
from controller.clock import utc_now, utc_now_precise
from controller.meta import Obj
from controller.metrics.registry import ControllerMetrics
from controller.rest.client import RESTClient
from controller.rest.resources import JOBS, PODS, PVCS, SERVICES
from controller.runtime import Result
from controller.runtime.events import EventRecorder
from controller.runtime.status import update_status
from controller.torchrunjob import lifecycle, starting
from controller.torchrunjob import status as st
from controller.torchrunjob.actions import Actions
from controller.torchrunjob.admission import Admission, Refusal, admit
from controller.torchrunjob.children import Children
from controller.torchrunjob.claims import WorkspaceClaims
from controller.torchrunjob.disruption import disrupted_restart
from controller.torchrunjob.generations import Generations, SyncSettings, WorkspaceState
from controller.torchrunjob.inplace import InPlace
from controller.torchrunjob.managed_etcd import ManagedEtcd
from controller.torchrunjob.manifests.etcd import READY, EtcdState
from controller.torchrunjob.manifests.rendezvous import DEFAULT_CLUSTER_DOMAIN
from controller.torchrunjob.manifests.service import build_service, service_drift
from controller.torchrunjob.manifests.storage import DEFAULT_SYNC_IMAGE
from controller.torchrunjob.podgroups import PodGroups
from controller.torchrunjob.progress import ProgressSettings, ProgressStep
from controller.torchrunjob.reload import HotReload
from controller.torchrunjob.reporter import StatusReporter
from controller.torchrunjob.start_evidence import StartEvidence
from controller.torchrunjob.steps import Decision, Observed, Proceed, Step, wait
from controller.torchrunjob.updater import JobTracker, JobUpdater, QueueParses
from controller.torchrunjob.workers import Attempt, Workers, WorkerSettings

log = structlog.get_logger("torchrunjob")
T = TypeVar("T")

COUNTS_BATCH = 5.0
"""Seconds a status write that changes only `status.workers` and condition messages may wait for
more (`JobUpdater.hold_counts`): a 256-node job's start is a handful of writes, not one per pod."""


@dataclasses.dataclass
class Options:
    autoclean: bool = False
    restart_limit: int = 10
    sync_image: str = DEFAULT_SYNC_IMAGE
    upload_timeout: float = 3600.0
    claim_bind_timeout: float = 300.0
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    progress: ProgressSettings = dataclasses.field(default_factory=ProgressSettings)


class TorchrunJobReconciler:
    def __init__(
        self,
        client: RESTClient,
        *,
        jobs: Lister,
        queues: Lister,
        worker_jobs: Lister,
        services: Lister,
        pods: Lister,
        claims: Lister,
        recorder: EventRecorder,
        pod_groups: PodGroups,
        options: Options | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.client = client
        self.jobs = jobs
        self.queues = queues
        self.recorder = recorder
        self.options = opts = options or Options()
        self.children = Children(client, {JOBS: worker_jobs, SERVICES: services, PODS: pods, PVCS: claims})
        self.etcd = ManagedEtcd(self.children)
        self.claims = WorkspaceClaims(client, self.children, opts.claim_bind_timeout)
        sync = SyncSettings(opts.sync_image, opts.upload_timeout)
        self.generations = Generations(self.children, self.claims, sync)
        workers = WorkerSettings(opts.sync_image, opts.cluster_domain, opts.progress.reporter)
        self.workers = Workers(client, self.children, pods, workers)
        self.pod_groups = pod_groups
        self.start_evidence = StartEvidence(client, pod_groups.kueue)
        self.actions = Actions(client, self.children, self.etcd, self.claims, self.generations)
        self.reporter = StatusReporter(client, recorder)
        self.progress = ProgressStep(opts.progress)
        self.reload = HotReload(client, recorder)
        self.in_place = InPlace(opts.progress.supervisors, opts.progress.reporter)
        self.metrics = metrics or client.metrics
        self.tracker = JobTracker()
        self.queue_parses = QueueParses()

    def reconcile(self, key: str) -> Result | None:
        ns, _, name = key.partition("/")
        raw = self.jobs.get(name, ns)
        if raw is None:
            self.tracker.drop(key)
            self.progress.forget(key)
            self.in_place.forget(key)
            return None
        if raw["metadata"].get("deletionTimestamp"):
            return None  # owner references take the rest away
        updater = self.tracker.get_or_create(key, raw["metadata"].get("uid", ""))
        version = raw["metadata"].get("resourceVersion", "")
        if updater.cache_behind(version):
            return None  # the watch event of our last status write brings the key back
        try:
            job = updater.memo("job", version, lambda: TorchrunJob.from_json(raw))
        except InvalidObjectError as exc:
            update_status(self.client, TORCHRUNJOBS, raw, st.invalid_status(raw, str(exc), utc_now()))
            return None
        if job.spec.seed_workspace and updater.once("seed_form_warned"):
            self.reporter.deprecated_field(raw, job)
        p = st.StatusUpdate(job, utc_now())
        try:
            self.sync(raw, job, p, updater)
        finally:  # what the steps returned so far is written even when one raised
            held = updater.hold_counts(time.monotonic(), COUNTS_BATCH) if p.routine_only() else None
            if held is not None:
                p.timer(held)
            else:
                p.fold_goodput(utc_now_precise())  # only into a status written anyway
                if self.reporter.write(raw, p):
                    updater.status_written(version)
        if p.requeue:
            return Result(requeue=True)
        return Result(requeue_after=min(p.timers)) if p.timers else None

    def sync(self, raw: Obj, job: TorchrunJob, p: st.StatusUpdate, updater: JobUpdater) -> None:
        """The steps of the module docstring, in order; each answers (`steps.py`), `take` records."""
        if p.is_true(C.SUCCEEDED) or p.is_true(C.FAILED):
            self.take(job, p, self.finished(job, p.status, p.now))
            return
        admitted = self.take(job, p, self.admit(job, p.status, p.now, updater))
        if admitted is None or self.take(job, p, lifecycle.deadline_of(job, p.status, p.now)) is None:
            return
        admission = admitted.value
        claim = self.take(job, p, self.claims.ensure(job, admission.queue, admission.topology))
        if claim is None or self.take(job, p, self.generation(job, admission, claim.value, p)) is None:
            return
        if self.take(job, p, self.service(job)) is None:
            return
        etcd = self.take(job, p, self.etcd_step(job, admission, p.status))
        if etcd is None or self.take(job, p, self.gang(job, admission)) is None:
            return
        attempt = self.take(job, p, self.workers.ensure(job, admission, p.status, etcd.value, updater))
        if attempt is not None:
            p.point = self.progress.point(job, attempt.value.job, p.status.restarts)
            self.take(job, p, self.observe(raw, job, attempt.value, p.status, p.now, updater))

    def take(self, job: TorchrunJob, p: st.StatusUpdate, answer: Step[T]) -> Proceed[T] | None:
        """Record what a step decided and carry out its actions; the `Proceed` to go on with, or
        None where the pass ends."""
        decision = answer.decision if isinstance(answer, Proceed) else answer
        p.decided(decision)
        for action in decision.actions:
            self.actions.carry_out(job, action)
        return answer if isinstance(answer, Proceed) else None

    # -- the steps ---------------------------------------------------------------------------

    def finished(self, job: TorchrunJob, status: TorchrunJobStatus, now: datetime) -> Decision:
        """What a finished job still needs (`lifecycle.finished`)."""
        worker = self.children.get(JOBS, job)
        running = worker is not None and st.worker_outcome(worker) is None
        syncing = self.generations.syncing(job)
        return lifecycle.finished_of(job, status, self.options.autoclean, running, syncing, now)

    def admit(
        self, job: TorchrunJob, status: TorchrunJobStatus, now: datetime, updater: JobUpdater
    ) -> Step[Admission]:
        """The queue, topology and command when the job may run, with `Admitted=True`, its size
        and start time; else `Admitted=False` (decided again only when the job or its queue
        changed: `JobUpdater.memo`)."""
        raw_queue = self.queues.get(job.spec.job_queue)
        meta = {} if raw_queue is None else raw_queue["metadata"]
        versions = (job.metadata.resource_version, meta.get("uid"), meta.get("resourceVersion"))
        verdict = updater.memo("admission", versions, lambda: admit(job, raw_queue, self.queue_parses.parse))
        if isinstance(verdict, Refusal):
            return wait(Observed(C.ADMITTED, False, verdict.reason, verdict.message))
        changes: dict[str, Any] = {"nodes": verdict.topology.nodes, "gpus": verdict.topology.total_gpus}
        if status.start_time is None:
            changes["start_time"] = now
        return Proceed(
            verdict, Decision((Observed(C.ADMITTED, True, Reason.ADMITTED, verdict.message),), changes)
        )

    def generation(
        self, job: TorchrunJob, admission: Admission, claim: Obj | None, p: st.StatusUpdate
    ) -> Step[WorkspaceState]:
        """A code generation is synced (the one in use stays during a reload)."""
        return self.generations.ensure(job, admission.queue, admission.topology, claim, p.status, p.now)

    def service(self, job: TorchrunJob) -> Step[Obj]:
        """The headless Service exists and is ours (its spec patched back if it drifted)."""
        desired = build_service(job)
        got = self.children.ensure(SERVICES, job, desired)
        if isinstance(got, Proceed) and (patch := service_drift(got.value, desired)) is not None:
            self.client.patch(SERVICES, job.name, patch, job.namespace)
        return got

    def etcd_step(self, job: TorchrunJob, admission: Admission, status: TorchrunJobStatus) -> Step[EtcdState]:
        """The managed etcd's state (READY for jobs that need none)."""
        if not job.spec.distributed.runs_managed_etcd:
            return Proceed(READY)
        return self.etcd.ensure(job, admission.queue, status.attempt)

    def gang(self, job: TorchrunJob, admission: Admission) -> Step[None]:
        """The gang's PodGroup exists before any pod, or Kueue's switch follows (`podgroups.py`)."""
        return self.pod_groups.ensure(job, admission.queue, admission.topology)

    def observe(
        self,
        raw: Obj,
        job: TorchrunJob,
        attempt: Attempt,
        status: TorchrunJobStatus,
        now: datetime,
        updater: JobUpdater,
    ) -> Step[None]:
        """The attempt's state becomes the job's conditions (lifecycle.py; a stall: progress.py;
        a hot reload: reload.py)."""
        topo, fp = attempt.topology, job.spec.failure_policy
        was_suspended = find_condition(status.conditions, C.SUSPENDED) is not None
        seen = Decision(lifecycle.suspension(job.spec.suspend, was_suspended), attempt.observed(status))
        if job.spec.suspend:
            return Proceed(None, seen)
        status = dataclasses.replace(status, **seen.changes)  # size, worker counts, checkpoints
        outcome = st.worker_outcome(attempt.job)
        final = outcome is not None
        progress = self.progress.observe(job, attempt.queue, attempt.job, attempt.pods, status, now, final)
        seen = seen.then(progress.decision)
        if outcome is None and not self.in_place.on(job):  # a disrupted rank: a new attempt at once
            suspended = (attempt.job.get("spec") or {}).get("suspend") is True
            made_for = annotated_generation(attempt.job)
            disrupted = disrupted_restart(job, attempt.pods, status, made_for=made_for, suspended=suspended)
            if disrupted is not None:
                return seen.then(disrupted)
        if outcome is None:
            found = st.retriable_failures(
                attempt.pods, attempt.job["metadata"]["uid"], fp.retriable_exit_codes
            )
            # failed pods may be cleaned up by someone else: the count never goes down in an attempt
            failures = max(found, status.retriable_failures)
            seen = seen.then(Decision(changes={"retriable_failures": failures}))
            capped = lifecycle.retriable_limit(failures, fp.max_retriable_failures, fp.retriable_exit_codes)
            limit = min(fp.max_restarts, self.options.restart_limit)
            answer = self.in_place.decide(job, attempt, status, limit, failures, capped, progress.value, now)
            if isinstance(answer, Decision):
                return seen.then(answer)  # restarted in place
            outcome = answer
        if outcome is not None:
            limit = min(fp.max_restarts, self.options.restart_limit)
            ttl = job.spec.ttl_seconds_after_finished
            ended = lifecycle.attempt_ended(
                outcome,
                restarts=status.restarts,
                limit=limit,
                ttl_seconds=ttl,
                now=now,
                by_reason=status.restarts_by_reason,
            )
            return seen.then(ended)
        if self.in_place.on(job):  # the supervisors' generation, and a hot reload by a new one
            seen = seen.then(self.in_place.running(job, attempt, status, now))
            seen = seen.then(self.reload.in_place(raw, attempt, status, now) or Decision())
        else:
            self.reload.roll(raw, attempt, status)
        ready, blocked, growth, look_again = status.workers.ready, None, None, None
        if ready < topo.nodes:
            evidence, look_again = self.start_evidence.gather(job, attempt, updater, now)
            blocked = starting.blocked(evidence)
            growth = starting.held_growth(evidence, ready, topo.nodes)
        running = lifecycle.running(ready, topo.nodes, blocked, growth)
        if (
            running.status
            and job.metadata.creation_timestamp is not None
            and updater.once("running_observed")
        ):
            self.metrics.submit_to_running.observe((now - job.metadata.creation_timestamp).total_seconds())
        return Proceed(None, seen.then(Decision((running,), requeue_after=look_again)))
