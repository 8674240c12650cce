"""The checkpoints' S3 mirror against an S3 server: `python -m controller.sync prepare --s3`, run as
every worker's `prepare` container runs it (controller/sync/checkpoint_s3.py).

The server is moto's (`python -m moto.server`, the `moto[server]` test extra), as in
test_sync_sources.py but without its authentication: a stand-in for Amazon S3, listed in the run's
summary. The client is the s3 source's own (`sources/s3.make_client`), configured from the same
`AWS_*` variables the mirror's Secret gives the container."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from summary_notes import CHECKPOINT_S3
from testbed import wait_until

BUCKET = "ckpt"
URI = f"s3://{BUCKET}/jobs/train/"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("logs") / "moto.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert server.poll() is None, log.read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"{url}/moto-api/", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        wait_until(answers, timeout=60, message="moto's server to answer")
        client(url).create_bucket(Bucket=BUCKET)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def client(url: str) -> Any:
    return boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )


def keys(url: str) -> set[str]:
    pages = client(url).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="jobs/train/")
    return {o["Key"][len("jobs/train/") :] for page in pages for o in page.get("Contents") or ()}


def prepare(root: Path, tmp_path: Path, url: str, rank: int, *flags: str) -> tuple[dict[str, Any], str]:
    """One `prepare` run: its termination message (rank 0) and its env file."""
    target, log = tmp_path / f"opt-{rank}", tmp_path / f"termination-{rank}"
    env = {
        "PATH": os.environ["PATH"], "TORCHRUN_NODE_RANK": str(rank), "TORCHRUN_TERMINATION_LOG": str(log),
        "AWS_ENDPOINT_URL": url, **CREDENTIALS,
    }  # fmt: skip
    argv = ["prepare", "--target", str(target), "--checkpoints", str(root), "--s3", URI, *flags]
    proc = subprocess.run(
        [sys.executable, "-m", "controller.sync", *argv],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(log.read_text())["checkpoint"] if log.exists() else {}
    return report, (target / "env").read_text()


def checkpoint(
    root: Path, name: str, files: dict[str, str], marker: str | None = ".torchrun_complete"
) -> None:
    (root / name).mkdir(parents=True)
    for rel, text in files.items():
        (root / name / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / name / rel).write_text(text)
    if marker:
        (root / name / marker).write_text("{}")


@pytest.mark.stand_in(CHECKPOINT_S3)
def test_mirrored_at_each_start_pruned_there_too_and_restored_on_a_lost_volume(
    endpoint: str, tmp_path: Path
) -> None:
    root = tmp_path / "volume"
    checkpoint(root, "step-4", {"model.pt": "four"})
    checkpoint(root, "step-8", {"__0_0.distcp": "eight", "sub/opt.pt": "o8"}, marker=".metadata")
    checkpoint(root, "step-9", {"half.pt": "nine"}, marker=None)  # incomplete: never mirrored
    (root / "step-8" / "link").symlink_to(tmp_path)  # a link: never uploaded
    report, _ = prepare(root, tmp_path, endpoint, 0, "--keep", "2")
    assert (report["mirrored"], report["resumedFrom"], report["problems"]) == (2, str(root / "step-8"), [])
    assert keys(endpoint) == {
        "step-4/model.pt", "step-4/.torchrun_complete", "step-4/.torchrun-mirrored",
        "step-8/__0_0.distcp", "step-8/sub/opt.pt", "step-8/.metadata", "step-8/.torchrun-mirrored",
    }  # fmt: skip

    checkpoint(root, "step-12", {"model.pt": "twelve"})
    report, _ = prepare(root, tmp_path, endpoint, 0, "--keep", "2")
    assert (report["mirrored"], report["pruned"]) == (1, 2)  # step-4 and the abandoned step-9 went
    assert {k.split("/")[0] for k in keys(endpoint)} == {"step-8", "step-12"}  # keep applies there too

    lost = tmp_path / "new-volume"  # a new cluster, a lost volume: rank 1 starts first
    report1, env1 = prepare(lost, tmp_path, endpoint, 1, "--keep", "2")
    assert report1 == {} and env1 == f"TORCHRUN_RESUME_FROM={lost}/step-12\n"
    assert (lost / "step-12" / "model.pt").read_text() == "twelve"
    report0, env0 = prepare(lost, tmp_path, endpoint, 0, "--keep", "2")
    assert env0 == env1 and report0.get("downloaded") is None  # rank 1 restored it before rank 0 looked
    assert (report0["resumedFrom"], report0["mirrored"]) == (str(lost / "step-12"), 0)
    assert sorted(p.name for p in lost.iterdir()) == ["step-12"]  # no temporary left behind

    other = tmp_path / "third-volume"
    report, env = prepare(other, tmp_path, endpoint, 0)
    assert report["downloaded"] == "step-12" and env == f"TORCHRUN_RESUME_FROM={other}/step-12\n"


@pytest.mark.stand_in(CHECKPOINT_S3)
def test_hostile_keys_never_land_outside_the_root_and_a_dead_store_is_a_problem_not_a_failure(
    endpoint: str, tmp_path: Path
) -> None:
    s3 = client(endpoint)
    for key in ("step-50/ok.pt", "step-50/../../escape.txt", "step-50//double", "step-50/.torchrun-mirrored",
                ".hidden/.torchrun-mirrored", "step-99/no-mirrored-object.pt"):  # fmt: skip
        s3.put_object(Bucket=BUCKET, Key="jobs/train/" + key, Body=b"x")
    root = tmp_path / "volume"
    report, env = prepare(root, tmp_path, endpoint, 0)
    assert report["downloaded"] == "step-50" and env.endswith("/step-50\n")  # step-99 is incomplete there
    inside = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert inside == ["step-50", "step-50/.torchrun_complete", "step-50/ok.pt"], inside
    assert not (tmp_path / "escape.txt").exists() and not (root.parent / "escape.txt").exists()

    dead = tmp_path / "dead"
    checkpoint(dead, "step-1", {"m.pt": "1"})
    report, env = prepare(dead, tmp_path, f"http://127.0.0.1:{free_port()}", 0)
    assert env == f"TORCHRUN_RESUME_FROM={dead}/step-1\n" and report["mirrored"] == 0
    assert len(report["problems"]) == 1 and report["problems"][0].startswith(f"mirroring to {URI}: ")
