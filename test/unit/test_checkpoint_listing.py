"""`kubectl torchrun checkpoints NAME`: the listing the pod prints (controller/checkpoint/listing.py),
the pod the plugin runs and the table it shows (controller/plugin/checkpoints.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jobspecs import job, queue, worker

from controller.checkpoint.listing import Listed, from_json, listing, to_json
from controller.plugin.checkpoints import listing_pod, listing_table
from controller.plugin.errors import PluginError
from controller.sync import protocol
from controller.sync.cli import _parser, main


def test_listing_sizes_every_entry_without_following_links(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ck"
    tree = {
        "step-4": {"a": 10, ".torchrun_complete": 2},
        "step-8": {".metadata": 5, "sub/b": 100},
        "step-12": {"half": 7},
        "best": {"x": 1},
    }
    for name, files in tree.items():
        for rel, size in files.items():
            (root / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / name / rel).write_bytes(b"x" * size)
    os.utime(root / "best", (1, 1))
    (root / "step-8" / "big-link").symlink_to(tmp_path)  # never followed, never counted
    (root / "losses.txt").write_text("not a checkpoint")
    got = listing(root)
    assert [(i.name, i.step, i.complete, i.kind, i.bytes) for i in got] == [
        ("step-8", 8, True, "dcp", 105),
        ("step-4", 4, True, "marker", 12),
        ("step-12", 12, False, None, 7),
        ("best", None, False, None, 1),
    ]
    assert from_json(to_json(got)) == got
    assert from_json("garbage") == [] and from_json('{"a": 1}') == []
    assert main(["checkpoints", "--root", str(root)], env={}) == 0
    assert from_json(capsys.readouterr().out.strip()) == got


def test_the_listing_pod_reads_the_workers_volume_read_only_where_they_run() -> None:
    q = queue(
        storage={"checkpoints": {"enabled": True, "mountPath": "/ckpt"}},
        securityContext={"runAsUser": 1000},
        scheduling={"nodeSelector": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
    )
    j = job()
    tj = {"metadata": {"name": "j", "uid": "u-1"}}
    pod = listing_pod(tj, worker(j, q, sync_image="sync:2"), "abcde")
    assert pod["metadata"]["name"] == "j-checkpoints-abcde"
    assert pod["metadata"]["ownerReferences"] == [
        {"apiVersion": "torchrun.ai/v1alpha1", "kind": "TorchrunJob", "name": "j", "uid": "u-1"}
    ]  # owned, not controlled: the controller never adopts it
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert c["image"] == "sync:2" and c["securityContext"]["runAsUser"] == 1000
    assert vars(_parser().parse_args(c["command"][len(protocol.PROGRAM) :]))["root"] == "/ckpt"
    assert c["volumeMounts"] == [{"name": "checkpoints", "mountPath": "/ckpt", "readOnly": True}]
    assert spec["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "j-checkpoints", "readOnly": True}}
    ]
    assert spec["nodeSelector"] == {"pool": "a"} and spec["tolerations"][0]["key"] == "gpu"
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    with pytest.raises(PluginError, match="no checkpoints volume"):
        listing_pod(tj, worker(j, queue()), "abcde")


def test_the_table_is_newest_first_one_line_per_entry() -> None:
    items = [
        Listed("step-8", 8, 1_764_064_800.0, True, "dcp", 3 * 1024 * 1024),
        Listed("x\nstep-9", 9, 0.0, False, None, 12),
    ]
    assert listing_table(items).splitlines() == [
        "NAME       STEP  TIME                  SIZE     COMPLETE",
        "step-8     8     2025-11-25T10:00:00Z  3.0 MiB  yes (dcp)",
        "x\\nstep-9  9     1970-01-01T00:00:00Z  12 B     no",
    ]
