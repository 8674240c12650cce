"""Every argv the controller and the plugin build for the sync program parses with the sync
program's own parser, to the values they meant (controller/sync/protocol.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobspecs import job, queue, worker

from controller.api import resolve_topology
from controller.sync import protocol
from controller.sync.cli import _parser
from controller.torchrunjob.manifests.syncpod import build_sync_pod


def parse(argv: list[str]) -> dict[str, object]:
    assert argv[: len(protocol.PROGRAM)] == list(protocol.PROGRAM)
    return vars(_parser().parse_args(argv[len(protocol.PROGRAM) :]))


def test_receive_argv_round_trips() -> None:
    args = parse(protocol.receive_argv(3, size=1234, sha256="AB" * 32))
    assert args["command"] == "receive"
    assert (args["generation"], args["size"], args["sha256"]) == (3, 1234, "ab" * 32)


def test_delta_argv_round_trips() -> None:
    args = parse(protocol.delta_argv(4, manifest_size=99, manifest_sha256="CD" * 32, sha256="AB" * 32))
    assert args["command"] == "delta"
    assert (args["generation"], args["manifest_size"]) == (4, 99)
    assert (args["manifest_sha256"], args["sha256"]) == ("cd" * 32, "ab" * 32)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (protocol.FetchSource("upload", timeout=600), {"source": "upload", "timeout": 600.0}),
        (
            protocol.FetchSource("git", url="https://git.example/r.git", ref="v1"),
            {"source": "git", "url": "https://git.example/r.git", "ref": "v1"},
        ),
        (protocol.FetchSource("git", url="https://git.example/r.git"), {"source": "git", "ref": None}),
        (
            protocol.FetchSource("s3", uri="s3://bucket/prefix/"),
            {"source": "s3", "uri": "s3://bucket/prefix/"},
        ),
        (protocol.FetchSource("pvc", sub_path="team/a"), {"source": "pvc", "sub_path": "team/a"}),
        (protocol.FetchSource("pvc"), {"source": "pvc", "sub_path": None}),
    ],
)
def test_fetch_argv_round_trips(source: protocol.FetchSource, expected: dict[str, object]) -> None:
    args = parse(protocol.fetch_argv(source, generation=2, max_bytes=10 << 30))
    assert args["command"] == "fetch"
    assert (args["generation"], args["max_bytes"]) == (2, 10 << 30)
    assert {k: args[k] for k in expected} == expected


def test_copy_argv_round_trips() -> None:
    args = parse(protocol.copy_argv(min_generation=4, target="/code", timeout=600))
    assert args["command"] == "copy"
    assert (args["min_generation"], args["target"], args["timeout"]) == (4, "/code", 600.0)


def test_prepare_argv_round_trips() -> None:
    args = parse(protocol.prepare_argv(target="/opt/torchrun"))
    assert (args["command"], args["target"]) == ("prepare", "/opt/torchrun")


def test_the_controller_builds_its_pods_with_these_argvs() -> None:
    """The sync pod's command and the workers' init container are the protocol's argvs."""
    j, q = job(workspace={"source": "git", "git": {"url": "https://git.example/r.git"}}), queue()
    topo = resolve_topology(j.spec, q.spec.node_resources)
    pod = build_sync_pod(j, q, topo, generation=1, image="sync:1", upload_timeout=60)
    (container,) = pod["spec"]["containers"]
    assert container["name"] == protocol.CONTAINER
    assert pod["metadata"]["name"] == protocol.sync_pod_name("j", 1)
    assert parse(container["command"])["url"] == "https://git.example/r.git"
    prepare, init, _reporter = worker(j, q, generation=1)["spec"]["template"]["spec"]["initContainers"]
    assert parse(init["command"])["min_generation"] == 1
    assert parse(prepare["command"])["target"] == "/opt/torchrun"


def test_the_program_is_spelled_in_one_place() -> None:
    """`python -m controller.sync` appears in the code only in protocol.py (and the program's own
    usage line)."""
    root = Path(protocol.__file__).resolve().parents[1]
    spelled = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if '"controller.sync"' in p.read_text() or "'controller.sync'" in p.read_text()
    ]
    assert spelled == ["sync/protocol.py"]
