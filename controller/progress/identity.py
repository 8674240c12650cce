"""Who is reporting: a projected service-account token proves a pod, the owner chain proves the job.

A report carries the pod's projected service-account token (audience `AUDIENCE`, bound to the
pod: the kubelet mints it). `TokenReviewer.review` asks the API server (TokenReview,
`authentication.k8s.io/v1`, with our audience) and accepts only an authenticated service account
whose token names a pod — the review's `authentication.kubernetes.io/pod-name` and `pod-uid`
extra fields, which only the API server's signer puts there, so a caller cannot forge them. The
API server also refuses a token whose pod is gone or was replaced (its UID is checked). Reviews
are cached for `CACHE_SECONDS` by the token's SHA-256 (never the token itself), at most
`CACHE_SIZE` entries: thousands of reporters would otherwise cost a review per report. Before a
review, a token is screened without any API call (`tokens.py`: refused cache, shape, audience,
expiry, the API server's signing keys) and reviews pass a gate that never waits (429 when full).

`prove(identity, claimed, pods=..., worker_jobs=..., jobs=...)` reads only the informer caches
(each a `(namespace, name)` getter): the pod named by the token must have that UID and be
controlled by a batch Job the cache holds (our worker Job, its UID matching the reference), and
the TorchrunJob that owns it (`api.resources.owning_job`, the one rule of ownership) must be in
the cache with that UID and be the one the report claims. Anything else is refused with the
reason: a pod of job B reporting for job A, a user's pod that only carries our label, a sync pod,
a pod from another namespace.

Every answer is a value, as admission's are: `identity_of`, `TokenReviewer.review` and `prove`
return what they proved or a `Refusal` (the HTTP status and why); only a failed API request
raises (`ApiError`: the reporter retries).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.api.distributed import MAX_NODES
from controller.api.resources import BATCH_JOB_KIND, owning_job
from controller.meta import Obj, Resource, controller_of
from controller.pods import node_rank
from controller.progress.tokens import (
    JWKS_PATH,
    JWKS_TYPE,
    Jwks,
    RefusedTokens,
    ReviewGate,
    Screen,
    Unscreened,
    digest,
)
from controller.rest.client import RESTClient

AUDIENCE = "torchrun-controller"
TOKENREVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"
CACHE_SECONDS = 300.0  # `prove` re-checks the pod's UID in the cache at every report
CACHE_SIZE = 10_000


Get = Callable[[str, str], Obj | None]
"""A cache read: the object of that namespace and name, or None."""


@dataclass(frozen=True)
class Refusal:
    """A report that is not accepted: `status` is the HTTP answer (401: who are you; 403: not
    this job's pod; 429: too many reviews at once), the message says why in one line."""

    status: int
    message: str


@dataclass(frozen=True)
class PodIdentity:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Reporter:
    """A pod proven to be one of the job's workers."""

    key: str  # namespace/name of the TorchrunJob
    job_uid: str
    attempt: str  # the worker Job's UID
    rank: int  # the pod's completion index: its node rank
    pod: str
    pod_uid: str = ""


def identity_of(review_status: Mapping[str, Any]) -> PodIdentity | Refusal:
    """The pod a TokenReview's status names; refused unless authenticated for our audience as a
    service account with the pod's name and UID."""
    if not review_status.get("authenticated"):
        return Refusal(401, f"token not accepted: {review_status.get('error') or 'not authenticated'}")
    if AUDIENCE not in (review_status.get("audiences") or ()):
        return Refusal(401, f"the token is not for audience {AUDIENCE}")
    user = review_status.get("user") or {}
    username = str(user.get("username") or "")
    if not username.startswith(SA_PREFIX):
        return Refusal(403, f"{username or 'the caller'} is not a service account")
    namespace = username[len(SA_PREFIX) :].split(":", 1)[0]
    extra = user.get("extra") or {}
    names: list[Any] = list(extra.get(POD_NAME_EXTRA) or ())
    uids: list[Any] = list(extra.get(POD_UID_EXTRA) or ())
    if len(names) != 1 or len(uids) != 1:
        return Refusal(403, "the token is not bound to a pod (mount a projected service-account token)")
    return PodIdentity(namespace, str(names[0]), str(uids[0]))


def prove(
    identity: PodIdentity, claimed: str, *, pods: Get, worker_jobs: Get, jobs: Get
) -> Reporter | Refusal:
    """The reporter, if its pod is a worker of TorchrunJob `claimed` (module docstring): the pod
    by the token's name, its worker Job by the pod's controller reference, the TorchrunJob that
    `owning_job` proves — each read from the caches, each UID checked."""
    where = f"pod {identity.namespace}/{identity.name}"
    pod = pods(identity.namespace, identity.name)
    if pod is None or pod["metadata"].get("uid") != identity.uid:
        return Refusal(403, f"{where} is not a worker pod the controller knows")
    ref = controller_of(pod)
    if ref is None or not BATCH_JOB_KIND.named_by(ref):
        return Refusal(403, f"{where} is not controlled by a worker Job")
    worker_job = worker_jobs(identity.namespace, str(ref.get("name")))
    if worker_job is None or worker_job["metadata"].get("uid") != ref.get("uid"):
        return Refusal(403, f"{where}: its Job {ref.get('name')} is not a worker Job the controller knows")
    owner = owning_job(pod, worker_jobs)
    if owner is None:
        return Refusal(403, f"{where}: its Job {ref.get('name')} is not controlled by a TorchrunJob")
    job = jobs(identity.namespace, owner.name)
    if job is None or job["metadata"].get("uid") != owner.uid:
        return Refusal(403, f"{where}: its TorchrunJob {owner.name} is gone or was replaced")
    if owner.name != claimed:
        return Refusal(403, f"{where} belongs to TorchrunJob {owner.name}, not {claimed}")
    rank = _rank(where, pod, worker_job)
    if isinstance(rank, Refusal):
        return rank
    return Reporter(f"{identity.namespace}/{claimed}", owner.uid, str(ref["uid"]), rank, where, identity.uid)


def _rank(where: str, pod: Obj, worker_job: Obj) -> int | Refusal:
    """The pod's node rank, from what its owner set and its user cannot change: the completion
    index the Job controller put in the pod's immutable `spec.hostname` (`<worker Job>-<index>`),
    with which the index annotation (a user may edit annotations) must agree; and below the
    worker Job's completions and `MAX_NODES` — so one job's reports are kept for at most its own
    ranks, never thousands a pod made up."""
    rank = node_rank(pod)
    if rank is None:
        return Refusal(403, f"{where} has no completion index")
    hostname = str((pod.get("spec") or {}).get("hostname") or "")
    if hostname and hostname != f"{worker_job['metadata'].get('name')}-{rank}":
        return Refusal(403, f"{where}: its completion index {rank} is not its hostname's ({hostname})")
    completions = (worker_job.get("spec") or {}).get("completions")
    size = min(completions if isinstance(completions, int) else MAX_NODES, MAX_NODES)
    if not 0 <= rank < size:
        return Refusal(403, f"{where}: rank {rank} is outside the job's {size} nodes")
    return rank


class TokenReviewer:
    """Screened TokenReviews with caches of the accepted and the refused (module docstring).

    `review(token)` answers the pod a token proves or a `Refusal`: 401 from the refused cache
    or the screen (`tokens.py`: no API call), 429 when the review gate is full (never cached, the
    reporter retries), else the TokenReview's verdict — cached, accepted ones for `CACHE_SECONDS`
    (never past the token's own expiry), refused ones for `tokens.REFUSED_SECONDS`."""

    def __init__(
        self,
        client: RESTClient,
        *,
        clock: Any = time.monotonic,
        screen: Screen | None = None,
        gate: ReviewGate | None = None,
    ) -> None:
        self.client = client
        self.clock = clock
        self.screen = screen if screen is not None else Screen(AUDIENCE, Jwks(self._fetch_keys, clock=clock))
        self.gate = gate if gate is not None else ReviewGate()
        self.refused = RefusedTokens(clock=clock)
        self.reviews = 0  # TokenReviews sent (tests and benchmarks read it)
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[float, PodIdentity]] = OrderedDict()

    def _fetch_keys(self) -> Mapping[str, Any]:
        return self.client.request("get", "GET", JWKS_PATH, "jwks", attempts=1, accept=JWKS_TYPE)

    def review(self, token: str) -> PodIdentity | Refusal:
        key = digest(token)
        now = self.clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        if (refused := self.refused.get(key)) is not None:
            return Refusal(*refused)
        try:
            expires = self.screen.check(token)
        except Unscreened as e:
            self.refused.add(key, 401, str(e))
            return Refusal(401, str(e))
        if not self.gate.enter():
            return Refusal(429, "too many token reviews at once: retry")
        try:
            identity = self._send(token, key)
        finally:
            self.gate.leave()
        if isinstance(identity, Refusal):
            return identity
        with self._lock:
            left = max(0.0, expires - time.time())  # never cached past the token's own expiry
            self._cache[key] = (now + min(CACHE_SECONDS, left), identity)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return identity

    def _send(self, token: str, key: str) -> PodIdentity | Refusal:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [AUDIENCE]},
        }
        self.reviews += 1
        answer = self.client.request(
            "create", "POST", TOKENREVIEWS.path(), TOKENREVIEWS.key, body=body, attempts=1
        )
        verdict = identity_of(answer.get("status") or {})
        if isinstance(verdict, Refusal) and verdict.status == 401:  # the API server said no: always will
            self.refused.add(key, verdict.status, verdict.message)
        return verdict
