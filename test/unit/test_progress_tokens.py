"""The progress endpoint's cheap refusals (controller/progress/tokens.py): what a token must be
before a TokenReview may be spent on it, the refused cache, and the gate that never waits.

Tokens here are real JWS tokens signed with RSA and EC keys made for the test (PyJWT, as any
caller would make them); the key set is the JSON the API server serves at /openid/v1/jwks."""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from controller.progress.identity import AUDIENCE
from controller.progress.tokens import (
    JWKS_MIN_SECONDS,
    Jwks,
    RefusedTokens,
    ReviewGate,
    Screen,
    Unscreened,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rsa_key() -> Any:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwk(private: Any, kid: str, alg: str = "RS256") -> dict[str, Any]:
    algorithm = jwt.get_algorithm_by_name(alg)
    key: dict[str, Any] = json.loads(algorithm.to_jwk(private.public_key()))
    return {**key, "kid": kid, "use": "sig", "alg": alg}


def token(private: Any, kid: str, alg: str = "RS256", **claims: Any) -> str:
    body = {"aud": [AUDIENCE], "exp": int(time.time()) + 3600, "sub": "system:serviceaccount:ns:default"}
    body.update(claims)
    return jwt.encode(body, private, algorithm=alg, headers={"kid": kid})


@pytest.fixture(scope="module")
def keys() -> dict[str, Any]:
    return {"server": rsa_key(), "ec": ec.generate_private_key(ec.SECP256R1()), "attacker": rsa_key()}


def screen_of(keys: dict[str, Any], clock: Clock | None = None) -> tuple[Screen, list[int]]:
    fetched: list[int] = []

    def fetch() -> dict[str, Any]:
        fetched.append(1)
        return {"keys": [jwk(keys["server"], "k1"), jwk(keys["ec"], "k2", "ES256")]}

    return Screen(AUDIENCE, Jwks(fetch, clock=clock or Clock())), fetched


def test_a_token_the_api_server_signed_for_our_audience_passes(keys: dict[str, Any]) -> None:
    screen, fetched = screen_of(keys)
    exp = int(time.time()) + 600
    assert screen.check(token(keys["server"], "k1", exp=exp)) == exp  # what bounds the review's cache
    screen.check(token(keys["ec"], "k2", "ES256"))
    assert len(fetched) == 1  # the key set is read once, then cached


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda k: "not-a-jwt", "not a signed JWT"),
        (lambda k: "a.b.c", "not a signed JWT"),
        (lambda k: jwt.encode({"aud": [AUDIENCE], "exp": 2**40}, None, algorithm="none"), "algorithm 'none'"),
        (lambda k: jwt.encode({"aud": [AUDIENCE], "exp": 2**40}, "secret" * 6, algorithm="HS256"), "'HS256'"),
        (lambda k: token(k["attacker"], "k1"), "signature does not verify"),  # forged with the server's kid
        (lambda k: token(k["attacker"], "unknown-kid"), "a key the API server does not hold"),
        (lambda k: token(k["server"], "k1", aud=["another"]), f"not for audience {AUDIENCE}"),
        (lambda k: token(k["server"], "k1", exp=int(time.time()) - 3600), "expired"),
        (
            lambda k: jwt.encode({"aud": [AUDIENCE]}, k["server"], algorithm="RS256", headers={"kid": "k1"}),
            "audience",
        ),
    ],
    ids=[
        "garbage",
        "three-parts",
        "alg-none",
        "hmac",
        "forged",
        "unknown-key",
        "audience",
        "expired",
        "no-exp",
    ],
)
def test_what_is_refused_without_any_api_call(keys: dict[str, Any], make: Any, why: str) -> None:
    screen, _ = screen_of(keys)
    with pytest.raises(Unscreened, match=why.replace("(", r"\(")):
        screen.check(make(keys))


def test_an_unknown_key_id_reads_the_keys_again_at_most_every_min_seconds(keys: dict[str, Any]) -> None:
    clock = Clock()
    screen, fetched = screen_of(keys, clock)
    for _ in range(100):  # a flood of tokens naming keys the server does not hold
        with pytest.raises(Unscreened):
            screen.check(token(keys["attacker"], "rotated?"))
    assert len(fetched) == 1
    clock.now += JWKS_MIN_SECONDS
    with pytest.raises(Unscreened):
        screen.check(token(keys["attacker"], "rotated?"))
    assert len(fetched) == 2


def test_without_the_keys_the_claims_are_still_checked_and_the_keys_are_tried_again(
    keys: dict[str, Any],
) -> None:
    clock, calls = Clock(), []

    def refused() -> dict[str, Any]:
        calls.append(1)
        raise OSError("403 Forbidden")

    screen = Screen(AUDIENCE, Jwks(refused, clock=clock))
    screen.check(token(keys["attacker"], "k1"))  # no keys: its signature cannot be judged here
    with pytest.raises(Unscreened, match="expired"):
        screen.check(token(keys["attacker"], "k1", exp=int(time.time()) - 3600))
    assert len(calls) == 1
    clock.now += JWKS_MIN_SECONDS
    screen.check(token(keys["attacker"], "k1"))
    assert len(calls) == 2


def test_the_refused_cache_is_bounded_and_expires() -> None:
    clock = Clock()
    cache = RefusedTokens(clock=clock, size=3)
    for i in range(5):
        cache.add(f"d{i}", 401, f"no {i}")
    assert len(cache) == 3 and cache.get("d0") is None and cache.get("d4") == (401, "no 4")
    clock.now += 10_000
    assert cache.get("d4") is None


def test_the_gate_never_waits_and_caps_reviews_in_flight() -> None:
    gate = ReviewGate(qps=1000.0, burst=1000, in_flight=2)
    assert gate.enter() and gate.enter()
    started = time.monotonic()
    assert not gate.enter()  # both slots taken: refused at once
    assert time.monotonic() - started < 0.1
    gate.leave()
    assert gate.enter()
    gate.leave()
    gate.leave()

    slow = ReviewGate(qps=0.001, burst=3, in_flight=100)
    assert [slow.enter() for _ in range(5)] == [True, True, True, False, False]  # the bucket, no debt
