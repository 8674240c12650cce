"""Bogus progress reports against the controller's progress endpoint, and what they cost a normal
job: the time from its create to phase Running, with and without a flood, in one run.

    python hack/bench/token_flood.py [--rate 50] [--jobs 5]

It starts a private control plane (common.control_plane), the CRDs, a queue and one controller
program with its progress endpoint, then starts `--jobs` jobs one after another without a flood
and `--jobs` more while `--rate` POSTs per second (distinct, well-formed JWTs with our audience
and a future expiry, signed by a key the API server does not trust) hit the endpoint, and prints
each series' p50 and max with the ratio, the POSTs sent by answer, and the TokenReviews the API
server received (its audit log) during each series. test/integration/test_progress_flood.py uses
`forged_tokens` and `Flood` on the test bed; the request loops are bounded in count and time and
only ever reach 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jwt
from common import (
    REPO,
    control_plane,
    free_port,
    install_crds,
    kubectl,
    percentile,
    rest_client,
    table,
    torchrunjob,
)
from cryptography.hazmat.primitives.asymmetric import rsa

from controller.api.resources import TORCHRUNJOBS
from controller.rest import RESTClient

AUDIENCE = "torchrun-controller"  # controller.progress.identity.AUDIENCE


def forged_tokens(count: int) -> list[str]:
    """`count` distinct JWTs shaped like a projected service-account token for our audience, with
    an expiry an hour away, signed (RS256) by a key made here, which no API server trusts."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    out = []
    for i in range(count):
        claims = {
            "aud": [AUDIENCE],
            "exp": now + 3600,
            "iat": now,
            "nbf": now,
            "iss": "https://kubernetes.default.svc.cluster.local",
            "sub": f"system:serviceaccount:default:forged-{i}",
            "jti": uuid.uuid4().hex,
        }
        out.append(jwt.encode(claims, key, algorithm="RS256", headers={"kid": uuid.uuid4().hex[:16]}))
    return out


def _unverified_context() -> ssl.SSLContext:
    """A client TLS context that encrypts and verifies nothing, made once: a context from
    `ssl.create_default_context()` loads the system's CA bundle, ~20 ms of CPU under the GIL,
    which at a flood's rate starved the process that sends it (and times the jobs) more than
    the flood cost the controller."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


_UNVERIFIED = _unverified_context()


def post(url: str, token: str, job: str, timeout: float = 5.0) -> int:
    """One report as the reporter sends it (the endpoint's certificate is not verified), on a new
    connection each: its HTTP status, 0 when no answer came."""
    body = json.dumps({"job": job, "record": {"step": 1}, "secondsSinceChange": 0}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    req = urllib.request.Request(url, body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_UNVERIFIED) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


class Flood:
    """POST `tokens` to `url` at `rate` per second from `threads` threads until stopped, the tokens
    run out or `seconds` pass (whichever first); `answers` counts the HTTP statuses."""

    def __init__(self, url: str, tokens: list[str], rate: float, seconds: float, threads: int = 4) -> None:
        assert url.startswith("https://127.0.0.1:"), "a flood only ever reaches this machine"
        self.url, self.tokens, self.rate, self.seconds = url, tokens, rate, seconds
        self.answers: Counter[int] = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _take(self, started: float) -> str | None:
        with self._lock:
            if self._next >= len(self.tokens) or time.monotonic() - started > self.seconds:
                return None
            due = started + self._next / self.rate
            token = self.tokens[self._next]
            self._next += 1
        if (wait := due - time.monotonic()) > 0 and self._stop.wait(wait):
            return None
        return token

    def _run(self) -> None:
        started = self._started
        while not self._stop.is_set() and (token := self._take(started)) is not None:
            status = post(self.url, token, "flood")
            with self._lock:
                self.answers[status] += 1

    def __enter__(self) -> Flood:
        self._started = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)


def token_reviews(audit_dir: Path, since: float, until: float) -> int:
    """TokenReviews the API server received between two wall-clock times (its audit log)."""
    count = 0
    for path in sorted(audit_dir.glob("audit*.log")):
        with path.open() as f:
            for line in f:
                if '"tokenreviews"' not in line or not line.endswith("\n"):
                    continue
                event = json.loads(line)
                stamp = event["requestReceivedTimestamp"].replace("Z", "+00:00")
                when = datetime.fromisoformat(stamp).timestamp()
                if event["verb"] == "create" and since <= when <= until:
                    count += 1
    return count


def job_verbs(rest: RESTClient, ns: str, queue: str) -> tuple[Callable[[str], None], Callable[[str], str]]:
    """Create a 2-node TorchrunJob of `queue` by name, and read a job's phase by name."""

    def create(name: str) -> None:
        body = torchrunjob(name, queue, command="python t.py")
        rest.request("create", "POST", TORCHRUNJOBS.path(ns), TORCHRUNJOBS.key, body=body)

    def phase(name: str) -> str:
        got = rest.request("get", "GET", TORCHRUNJOBS.path(ns, name), TORCHRUNJOBS.key)
        return str((got.get("status") or {}).get("phase", ""))

    return create, phase


def time_to_running(create: Callable[[str], None], phase: Callable[[str], str], name: str) -> float:
    """Seconds from the create of job `name` to the first read of phase Running (60 s at most)."""
    started = time.monotonic()
    create(name)
    while time.monotonic() - started < 60:
        if phase(name) == "Running":
            return time.monotonic() - started
        time.sleep(0.02)
    raise TimeoutError(f"job {name} not Running after 60 s")


# -- the benchmark -----------------------------------------------------------------------------


@contextlib.contextmanager
def _bed(kubeconfig: Path, log: Path) -> Iterator[tuple[str, Any, str]]:
    """A namespace, a queue, and a controller program with its progress endpoint: (namespace,
    a RESTClient, the endpoint's URL)."""
    install_crds(kubeconfig, REPO / "crd")
    ns = "flood"
    kubectl(kubeconfig, "create", "namespace", ns)
    queue = {
        "apiVersion": "torchrun.ai/v1alpha1",
        "kind": "TorchrunQueue",
        "metadata": {"name": "flood"},
        "spec": {
            "nodeResources": {"gpus": 0, "cpus": "20m"},
            "image": "pytorch/pytorch:2.4.0",
            "podAnnotations": {"kwok.torchrun.ai/outcome": "run", "kwok.torchrun.ai/duration": "1h"},
        },
    }
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(queue))
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "controller.cmd.main",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        ns,
    ]
    command += ["--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"]
    command += [f"--progress-bind-address=127.0.0.1:{port}", "--log-format", "console"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        url = f"https://127.0.0.1:{port}/v1/progress"
        deadline = time.monotonic() + 60
        while post(url, "x", "probe") == 0:
            if time.monotonic() > deadline:
                raise TimeoutError("the progress endpoint never answered")
            time.sleep(0.2)
        yield ns, rest_client(kubeconfig), url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="bogus POSTs per second")
    parser.add_argument("--jobs", type=int, default=5, help="jobs timed in each series")
    parser.add_argument("--threads", type=int, default=8, help="threads posting the flood")
    args = parser.parse_args(argv)
    with control_plane(nodes=2) as kubeconfig, _bed(kubeconfig, kubeconfig.parent / "controller.log") as bed:
        ns, rest, url = bed

        create, phase = job_verbs(rest, ns, "flood")

        rows, answers, series = [], Counter[int](), {}
        for label in ("quiet", f"flood {args.rate:g}/s"):
            since = time.time()
            flood = Flood(
                url, forged_tokens(int(args.rate * 40 * args.jobs)), args.rate, 60.0 * args.jobs, args.threads
            )
            with flood if label != "quiet" else contextlib.nullcontext():
                time.sleep(2.0 if label != "quiet" else 0.0)  # the flood is at full rate before the first job
                times = [time_to_running(create, phase, f"{label.split()[0]}-{i}") for i in range(args.jobs)]
            until = time.time()
            answers += flood.answers
            time.sleep(1.0)
            series[label] = times
            reviews = token_reviews(kubeconfig.parent, since, until)
            sent = sum(flood.answers.values()) if label != "quiet" else 0
            achieved = f"{sent / (until - since):.1f}/s" if sent else "-"
            rows.append([label, f"{percentile(times, 50):.2f}", f"{max(times):.2f}", sent, achieved, reviews])
        base, loud = (percentile(v, 50) for v in series.values())
        print(table(["series", "p50 s to Running", "max s", "bogus POSTs", "achieved", "TokenReviews"], rows))
        print(f"ratio flood/quiet p50: {loud / base:.2f}x; answers to the flood: {dict(answers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
