"""Cheap refusals of progress tokens, before any TokenReview (docs/security.md).

Any pod can POST a report with any bearer token, and each TokenReview is an API call: unscreened,
a flood of bogus tokens would cost the controller its API budget. So a token is screened first,
each step costing no API call:

1. `RefusedTokens`: a token refused in the last `REFUSED_SECONDS` (kept by its SHA-256, never
   the token; at most `REFUSED_SIZE`, the oldest dropped) is refused again with the same message.
2. `Screen.check`: a JWS compact token signed with an algorithm the API server's signer uses
   (`ALGORITHMS`: never `none` or a shared-secret HMAC), whose `aud` holds our audience and whose
   `exp` is in the future (`LEEWAY` seconds of clock skew) — and whose signature verifies with one
   of the API server's service-account issuer keys (`Jwks`: `GET /openid/v1/jwks`, fetched at first
   use, again every `JWKS_SECONDS`, and at most every `JWKS_MIN_SECONDS` when a token names a key
   id it does not hold: keys rotate). When the keys cannot be read (the endpoint refused, the API
   server down), the signature step is skipped, said once, and tried again after
   `JWKS_MIN_SECONDS`: the TokenReview still decides, inside the gate.
3. `ReviewGate`: the TokenReviews themselves go through a client of their own (its own pool and
   rate limiter, never the reconcilers'), a token bucket the gate never waits on and a cap on
   reviews in flight; when either is full the report is refused 429 with `Retry-After` at once.
A well-formed token that a key the API server does not trust signed costs a signature check, no
API call; the controller's other requests never queue behind reviews.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import jwt
import structlog

from controller.flowcontrol import TokenBucket

log = structlog.get_logger("progress")

ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
LEEWAY = 30.0
JWKS_PATH = "/openid/v1/jwks"
JWKS_TYPE = "application/jwk-set+json"  # the only representation the API server serves there
JWKS_SECONDS = 600.0
JWKS_MIN_SECONDS = 30.0
REFUSED_SECONDS = 300.0
REFUSED_SIZE = 20_000
REVIEW_QPS = 50.0
REVIEW_BURST = 100
REVIEWS_IN_FLIGHT = 8


class Unscreened(Exception):  # noqa: N818 (a verdict, not a fault)
    """A token refused before any review; the message says why in one line."""


def digest(token: str) -> str:
    """What the caches key a token by: its SHA-256 (the token itself is never kept)."""
    return hashlib.sha256(token.encode()).hexdigest()


class RefusedTokens:
    """A bounded, expiring set of refused token digests with their messages (module doc, 1)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, size: int = REFUSED_SIZE) -> None:
        self.clock, self.size = clock, size
        self._lock = threading.Lock()
        self._refused: OrderedDict[str, tuple[float, int, str]] = OrderedDict()

    def get(self, key: str) -> tuple[int, str] | None:
        """The status and message a token was refused with, while that refusal is remembered."""
        with self._lock:
            hit = self._refused.get(key)
            if hit is None or hit[0] <= self.clock():
                return None
            return hit[1], hit[2]

    def add(self, key: str, status: int, message: str) -> None:
        with self._lock:
            self._refused[key] = (self.clock() + REFUSED_SECONDS, status, message)
            self._refused.move_to_end(key)
            while len(self._refused) > self.size:
                self._refused.popitem(last=False)

    def __len__(self) -> int:
        return len(self._refused)


class Jwks:
    """The API server's service-account issuer keys, read with `fetch()` (module doc, 2)."""

    def __init__(
        self, fetch: Callable[[], Mapping[str, Any]], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.fetch, self.clock = fetch, clock
        self._lock = threading.Lock()
        self._keys: dict[str, Any] | None = None  # kid → PyJWK; None: unknown (never read, or failed)
        self._read_at = -float("inf")
        self._said = False

    def keys(self, kid: str | None) -> dict[str, Any] | None:
        """The keys by id, read again when old or when `kid` is not among them (rate-limited);
        None when they could not be read: the caller skips the signature check."""
        with self._lock:
            now = self.clock()
            age = now - self._read_at
            stale = age >= JWKS_SECONDS or (self._keys is None and age >= JWKS_MIN_SECONDS)
            unknown = self._keys is not None and kid is not None and kid not in self._keys
            if stale or (unknown and age >= JWKS_MIN_SECONDS):
                self._read_at = now
                self._keys = self._read()
            return self._keys

    def _read(self) -> dict[str, Any] | None:
        try:
            found = jwt.PyJWKSet.from_dict(dict(self.fetch())).keys
        except Exception as e:  # any failure to read or parse: fall back to the review, say so once
            if not self._said:
                log.warning(
                    "service-account keys unreadable: tokens are not screened by signature", error=str(e)
                )
                self._said = True
            return None
        self._said = False
        return {str(k.key_id or i): k for i, k in enumerate(found)}


class Screen:
    """Shape, audience, expiry and signature of a token, without an API call (module doc, 2)."""

    def __init__(self, audience: str, jwks: Jwks | None) -> None:
        self.audience, self.jwks = audience, jwks

    def check(self, token: str) -> float:
        """The token's `exp` (seconds since the epoch) when it may be reviewed; raise `Unscreened`
        saying why it may not."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unscreened("the token is not a signed JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            raise Unscreened(f"the token's algorithm {alg!r} is not one a service-account signer uses")
        keys = self.jwks.keys(kid if isinstance(kid, str) else None) if self.jwks is not None else None
        if keys is None:
            return self._verify(token, alg, None)
        candidates = (
            [keys[kid]] if isinstance(kid, str) and kid in keys else ([] if kid else list(keys.values()))
        )
        if not candidates:
            raise Unscreened("the token is signed by a key the API server does not hold")
        last: Exception | None = None
        for key in candidates:
            try:
                return self._verify(token, alg, key)
            except Unscreened as e:
                last = e
        raise last or Unscreened("the token's signature does not verify")

    def _verify(self, token: str, alg: str, key: Any) -> float:
        """The token's `exp`, once its claims (and, with `key`, its signature) check out."""
        options: Any = {"require": ["exp", "aud"], "verify_exp": True, "verify_aud": True}
        try:
            if key is None:
                options["verify_signature"] = False
                claims = jwt.decode(
                    token, options=options, audience=self.audience, leeway=LEEWAY, algorithms=[alg]
                )
            else:
                claims = jwt.decode(
                    token, key.key, algorithms=[alg], audience=self.audience, leeway=LEEWAY, options=options
                )
            return float(claims["exp"])
        except jwt.ExpiredSignatureError:
            raise Unscreened("the token has expired") from None
        except (jwt.InvalidAudienceError, jwt.MissingRequiredClaimError):
            raise Unscreened(f"the token is not for audience {self.audience}") from None
        except jwt.InvalidSignatureError:
            raise Unscreened("the token's signature does not verify with the API server's keys") from None
        except (jwt.InvalidTokenError, ValueError, TypeError) as e:
            raise Unscreened(f"the token is not valid: {e}") from None


class ReviewGate:
    """Admission to a TokenReview that never waits: a token bucket and a cap on reviews in flight
    (module doc, 3). Use as `if gate.enter(): try: ... finally: gate.leave()`."""

    def __init__(
        self, qps: float = REVIEW_QPS, burst: int = REVIEW_BURST, in_flight: int = REVIEWS_IN_FLIGHT
    ):
        self.bucket = TokenBucket(qps, burst)
        self._slots = threading.BoundedSemaphore(in_flight)

    def enter(self) -> bool:
        """True when a review may be sent now (then `leave()` once it is answered)."""
        if not self._slots.acquire(blocking=False):
            return False
        if self.bucket.allow():
            return True
        self._slots.release()
        return False

    def leave(self) -> None:
        self._slots.release()
