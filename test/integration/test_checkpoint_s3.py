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
from conftest import running_app
from jobs import make_job, queue_manifest
from summary_notes import CHECKPOINT_S3
from testbed import Cluster, wait_until

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


def prepare(
    root: Path, tmp_path: Path, url: str, rank: int, *flags: str, uri: str = URI
) -> tuple[dict[str, Any], str]:
    """One `prepare` run: its termination message (rank 0) and its env file."""
    target, log = tmp_path / f"opt-{rank}", tmp_path / f"termination-{rank}"
    env = {
        "PATH": os.environ["PATH"], "TORCHRUN_NODE_RANK": str(rank), "TORCHRUN_TERMINATION_LOG": str(log),
        "AWS_ENDPOINT_URL": url, **CREDENTIALS,
    }  # fmt: skip
    argv = ["prepare", "--target", str(target), "--checkpoints", str(root), "--s3", uri, *flags]
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
    checkpoint(
        root, "step-9", {"half.pt": "nine"}, marker=".torchrun_started"
    )  # ours, incomplete: not mirrored
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


def mirror_arg(cluster: Cluster, ns: str, job: str) -> str:
    """The `--s3` its worker Job's `prepare` container gets, as the controller built it."""

    def built() -> list[str] | None:
        items = cluster.get("jobs", "-n", ns, "-l", f"torchrun-job-name={job}")["items"]
        return items[0]["spec"]["template"]["spec"]["initContainers"][0]["command"] if items else None

    command = wait_until(built, 60, message=f"the worker Job of {ns}/{job}")
    return str(command[command.index("--s3") + 1])


def keys_under(url: str, prefix: str) -> set[str]:
    pages = client(url).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"] for page in pages for o in page.get("Contents") or ()}


@pytest.mark.stand_in(CHECKPOINT_S3)
def test_two_namespaces_on_one_queue_never_restore_list_or_delete_each_others_copies(
    cluster: Cluster, crds: Path, namespace: str, endpoint: str, tmp_path: Path
) -> None:
    """One queue, one mirror prefix (without its trailing /), a job `train` in namespaces A and B:
    each mirrors under its own sub-prefix; B's empty volume restores nothing of A's, B's retention
    deletes nothing of A's, and a copy planted at the old flat prefix is invisible to both. A new
    job of A's name (a new UID, no persisted claim) restores nothing the first one left."""
    other = f"{namespace}-b"
    cluster.create_namespace(other)
    queue = f"s3-{namespace}"
    mirror = {"uri": f"s3://{BUCKET}/shared", "secret": "s3"}
    storage = {"checkpoints": {"enabled": True, "keep": 1, "s3": mirror}}
    cluster.apply(queue_manifest(queue, duration="1h", storage=storage))
    try:
        with running_app(cluster, namespace), running_app(cluster, other):
            make_job(cluster, namespace, queue)
            make_job(cluster, other, queue)
            uri_a, uri_b = mirror_arg(cluster, namespace, "train"), mirror_arg(cluster, other, "train")
            uid_a = cluster.get("torchrunjob", "train", "-n", namespace)["metadata"]["uid"]
            assert uri_a == f"s3://{BUCKET}/shared/{namespace}/train/job-{uid_a}/"
            assert uri_b.startswith(f"s3://{BUCKET}/shared/{other}/train/job-") and uri_b != uri_a

            client(endpoint).put_object(
                Bucket=BUCKET, Key="shared/step-999999999/.torchrun-mirrored", Body=b""
            )
            volume_a = tmp_path / "a"
            checkpoint(volume_a, "step-10", {"model.pt": "a10"})
            checkpoint(volume_a, "step-20", {"model.pt": "a20"})
            report, _ = prepare(volume_a, tmp_path, endpoint, 0, uri=uri_a)
            assert report["mirrored"] == 2 and report["problems"] == [], report
            a_keys = keys_under(endpoint, uri_a[len(f"s3://{BUCKET}/") :])
            assert len(a_keys) == 6, a_keys  # model.pt, our marker and the mirrored object of each

            volume_b = tmp_path / "b"
            report, env = prepare(volume_b, tmp_path, endpoint, 0, "--keep", "1", uri=uri_b)
            assert env == "" and report.get("downloaded") is None and report["count"] == 0, (report, env)
            checkpoint(volume_b, "step-1", {"model.pt": "b1"})
            checkpoint(volume_b, "step-2", {"model.pt": "b2"})
            report, _ = prepare(volume_b, tmp_path, endpoint, 0, "--keep", "1", uri=uri_b)
            assert (report["mirrored"], report["pruned"]) == (1, 1), report  # step-1 pruned before the upload
            assert keys_under(endpoint, uri_a[len(f"s3://{BUCKET}/") :]) == a_keys  # B deleted nothing of A's
            assert "shared/step-999999999/.torchrun-mirrored" in keys_under(endpoint, "shared/step-")

            cluster.kubectl("delete", "torchrunjob", "train", "-n", namespace, "--wait=true")
            wait_until(
                lambda: not cluster.get("jobs", "-n", namespace)["items"], 60, message="A's worker Job gone"
            )
            make_job(cluster, namespace, queue)
            again = wait_until(
                lambda: (u := mirror_arg(cluster, namespace, "train")) != uri_a and u,
                60, message="the resubmitted job's worker Job",
            )  # fmt: skip
            report, env = prepare(tmp_path / "a-again", tmp_path, endpoint, 0, uri=str(again))
            assert env == "" and report.get("downloaded") is None, (report, env)
    finally:
        cluster.kubectl("delete", "torchrunqueue", queue, "--ignore-not-found", "--wait=false")
        cluster.delete_namespace(other)


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"  # written by the frameworks


def copy_keys(url: str, prefix: str) -> set[str]:
    pages = client(url).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"][len(prefix) :] for page in pages for o in page.get("Contents") or ()}


@pytest.mark.stand_in(CHECKPOINT_S3)
def test_checkpoint_files_real_frameworks_wrote_are_mirrored_and_restored_only_whole(
    endpoint: str, tmp_path: Path
) -> None:
    """Lightning's `epoch=0-step=N.ckpt` (its `last.ckpt` a link, as `save_last="link"` makes it)
    and torch.save's `ckpt_N.pt`, as those frameworks wrote them (test/fixtures/checkpoints): each
    file is one copy, its link is not; a lost volume gets the newest back byte for byte and resumes
    from it; a copy damaged in the store (cut short) is a problem line and never lands."""
    lightning = "jobs/lightning/"
    root = tmp_path / "volume"
    root.mkdir()
    for name in ("epoch=0-step=10.ckpt", "epoch=0-step=20.ckpt"):
        (root / name).write_bytes((FIXTURES / "lightning" / name).read_bytes())
    (root / "last.ckpt").symlink_to("epoch=0-step=20.ckpt")
    report, _ = prepare(root, tmp_path, endpoint, 0, "--keep", "5", uri=f"s3://{BUCKET}/{lightning}")
    assert (report["mirrored"], report["problems"]) == (2, [])
    assert copy_keys(endpoint, lightning) == {
        "epoch=0-step=10.ckpt/epoch=0-step=10.ckpt", "epoch=0-step=10.ckpt/.torchrun-mirrored",
        "epoch=0-step=20.ckpt/epoch=0-step=20.ckpt", "epoch=0-step=20.ckpt/.torchrun-mirrored",
    }  # fmt: skip

    lost = tmp_path / "lost"
    report, env = prepare(lost, tmp_path, endpoint, 0, uri=f"s3://{BUCKET}/{lightning}")
    assert report["downloaded"] == "epoch=0-step=20.ckpt", report
    assert env == f"TORCHRUN_RESUME_FROM={lost}/epoch=0-step=20.ckpt\n"
    assert (lost / "epoch=0-step=20.ckpt").read_bytes() == (
        FIXTURES / "lightning" / "epoch=0-step=20.ckpt"
    ).read_bytes()
    assert sorted(p.name for p in lost.iterdir()) == ["epoch=0-step=20.ckpt"]  # no temporary left

    torch_save = "jobs/nanogpt/"
    root = tmp_path / "torch-volume"
    root.mkdir()
    for name in ("ckpt_500.pt", "ckpt_1000.pt"):
        (root / name).write_bytes((FIXTURES / "torch_save" / name).read_bytes())
    report, _ = prepare(root, tmp_path, endpoint, 0, uri=f"s3://{BUCKET}/{torch_save}")
    assert report["mirrored"] == 2
    whole = (FIXTURES / "torch_save" / "ckpt_1000.pt").read_bytes()
    client(endpoint).put_object(
        Bucket=BUCKET, Key=f"{torch_save}ckpt_1000.pt/ckpt_1000.pt", Body=whole[:-100]
    )
    damaged = tmp_path / "damaged"
    report, env = prepare(damaged, tmp_path, endpoint, 0, uri=f"s3://{BUCKET}/{torch_save}")
    assert report.get("downloaded") is None and env == "", (report, env)
    (problem,) = report["problems"]
    assert "ckpt_1000.pt is not a complete checkpoint file" in problem, problem
    assert list(damaged.iterdir()) == []  # the cut copy never landed, nor its temporary
