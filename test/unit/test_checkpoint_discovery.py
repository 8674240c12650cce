"""Checkpoint discovery, retention and one start's choice against real trees on disk
(controller/checkpoint/): complete or not, ordered how, never leaving the root."""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from controller.checkpoint import by_age, latest, parse_report, prune, prune_plan, resume, scan
from controller.checkpoint import start as start_module
from controller.checkpoint.discovery import step_of
from controller.checkpoint.report import MAX_BYTES, CheckpointReport
from controller.checkpoint.retention import kept_by_frameworks
from controller.sync.cli import main

TOOLS_HELPER = Path(__file__).resolve().parents[2] / "controller" / "tools" / "python"


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("step-1200", 1200),
        ("step_1200", 1200),
        ("step1200", 1200),
        ("checkpoint-1200", 1200),
        ("global_step1200", 1200),
        ("epoch=3-step=1200", 1200),
        ("run-a-step-7", 7),
        ("step-0", 0),
        ("best", None),
        ("last", None),
        ("step-12a", None),
        ("mystep-12", None),
        ("checkpoint-", None),
        ("step-1200.tmp", None),
        ("step-5\n", None),
        ("ckpt_1000", 1000),
        ("iter_0001000", 1000),
        ("checkpoint_3", 3),
        ("iteration-12", 12),
        ("epoch=0-step=10-v1", 10),
        ("megatron_gpt--val_loss=2.52-step=1000-consumed_samples=8000.0", 1000),
        ("megatron_gpt--val_loss=2.52-step=1000-consumed_samples=8000.0-last", 1000),
        ("step=100-val_loss=0.52", 100),
        ("step-5-final", None),
        ("resnet_50", None),
        ("model_v2", None),
        ("checkpoint-5\n", None),
        ("step-" + "9" * 19, None),
    ],
)
def test_the_step_comes_from_the_name(name: str, step: int | None) -> None:
    assert step_of(name) == step


def make(root: Path, tree: dict[str, Any], mtime: float = 1_700_000_000.0) -> None:
    """Build `tree` under root: name → list of files (a directory), "file", or ("link", target).
    Entries get increasing mtimes in the order given (their files too)."""
    root.mkdir(parents=True, exist_ok=True)
    for i, (name, what) in enumerate(tree.items()):
        path = root / name
        if what == "file":
            path.write_text("x")
        elif isinstance(what, tuple):
            path.symlink_to(what[1])
        else:
            path.mkdir()
            for f in what:
                if isinstance(f, tuple):
                    (path / f[0]).symlink_to(f[1])
                else:
                    (path / f).write_text("{}")
                    os.utime(path / f, (mtime + i, mtime + i))
        if not isinstance(what, tuple):
            os.utime(path, (mtime + i, mtime + i))


OUTSIDE = "outside"  # a sibling of the root, holding a complete checkpoint
CASES: dict[str, tuple[dict[str, Any], str | None, set[str]]] = {
    # tree, the latest complete entry, the complete entries
    "dcp with and without .metadata": (
        {"step-100": [".metadata", "__0_0.distcp"], "step-200": ["__0_0.distcp"]},
        "step-100",
        {"step-100"},
    ),
    "hf with and without trainer_state.json": (
        {
            "checkpoint-300": ["trainer_state.json", "model.safetensors"],
            "checkpoint-400": ["model.safetensors"],
        },
        "checkpoint-300",
        {"checkpoint-300"},
    ),
    "trainer_state.json counts only under an hf name": (
        {"step-5": [".torchrun_complete"], "export-9": ["trainer_state.json"]},
        "step-5",
        {"step-5"},
    ),
    "our marker": ({"step-1": [".torchrun_complete"], "step-2": ["model.pt"]}, "step-1", {"step-1"}),
    "steps order, not times": (
        {"step-900": [".torchrun_complete"], "step-1000": [".torchrun_complete"], "step-20": [".metadata"]},
        "step-1000",
        {"step-900", "step-1000", "step-20"},
    ),
    "names without a step order by their marker's time": (
        {"best": [".torchrun_complete"], "step-50": [".torchrun_complete"], "latest": [".torchrun_complete"]},
        "latest",
        {"best", "step-50", "latest"},
    ),
    "lightning and deepspeed names": (
        {"epoch=3-step=1200": [".torchrun_complete"], "global_step1300": [".metadata"]},
        "global_step1300",
        {"epoch=3-step=1200", "global_step1300"},
    ),
    "symlinks leaving the root are never entries": (
        {"step-1": [".torchrun_complete"], "step-999": ("link", f"../{OUTSIDE}/step-999")},
        "step-1",
        {"step-1"},
    ),
    "a symlink inside the root is not an entry either": (
        {"step-3": [".torchrun_complete"], "step-4": ("link", "step-3")},
        "step-3",
        {"step-3"},
    ),
    "a marker or .metadata that is a link does not count": (
        {
            "step-1": [".torchrun_complete"],
            "step-7": [(".torchrun_complete", f"../../{OUTSIDE}/step-999/.torchrun_complete")],
            "step-8": [(".metadata", "/etc/hostname")],
        },
        "step-1",
        {"step-1"},
    ),
    "files, hidden and temporary directories are ignored": (
        {"step-9.pt": "file", ".tmp-step-10": [".torchrun_complete"], "step-2": [".metadata"]},
        "step-2",
        {"step-2"},
    ),
    "hostile names stay names": (
        {
            "step-5\n-step-6": [".torchrun_complete"],
            "..step-7": [".metadata"],
            "a b;$(x)-step-3": [".metadata"],
        },
        "step-5\n-step-6",
        {"step-5\n-step-6", "a b;$(x)-step-3"},
    ),
    "nothing complete": ({"step-1": [], "step-2": ["model.pt"]}, None, set()),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_discovery_over_a_table_of_trees(tmp_path: Path, case: str) -> None:
    tree, want_latest, want_complete = CASES[case]
    make(tmp_path / OUTSIDE, {"step-999": [".torchrun_complete", ".metadata"]})
    root = tmp_path / "root"
    make(root, tree)
    entries = scan(root)
    assert {e.name for e in entries if e.complete} == want_complete
    chosen = latest(entries)
    assert (chosen.name if chosen else None) == want_latest
    for e in entries:
        assert e.path.parent == root and os.path.realpath(e.path).startswith(str(root) + os.sep)


def test_a_root_that_does_not_exist_or_is_a_file_has_no_checkpoints(tmp_path: Path) -> None:
    assert scan(tmp_path / "missing") == []
    (tmp_path / "file").write_text("x")
    assert scan(tmp_path / "file") == []


def test_a_non_utf8_name_is_found_and_written_to_the_env_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    name = os.fsdecode(b"step-\xff-step-4")
    make(root, {name: [".torchrun_complete"]})
    assert [e.name for e in scan(root)] == [name]
    assert main(["prepare", "--target", str(tmp_path / "t"), "--checkpoints", str(root)], env={}) == 0
    assert os.fsencode(str(root / name)) in (tmp_path / "t" / "env").read_bytes()


def test_ten_thousand_entries(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for i in range(10_000):
        (root / f"step-{i}").mkdir()
        if i % 2 == 0:
            (root / f"step-{i}" / ".torchrun_complete").write_text("{}")
    started = time.monotonic()
    entries = scan(root)
    seconds = time.monotonic() - started
    assert len(entries) == 10_000 and sum(e.complete for e in entries) == 5_000
    chosen = latest(entries)
    assert chosen is not None and chosen.name == "step-9998"
    plan = prune_plan(entries, 3)
    assert len(plan.remove) == 5_000 - 3  # the incomplete ones below 9998 are not saves we started:
    assert len(plan.kept) == 4_999  # kept, and said
    assert seconds < 30, seconds  # a generous bound: a start must not spend minutes here


def tree_of(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_retention_keeps_the_newest_complete_and_removes_abandoned_saves(tmp_path: Path) -> None:
    make(tmp_path / OUTSIDE, {"step-999": [".torchrun_complete"]})
    root = tmp_path / "root"
    make(
        root,
        {
            "step-10": [".torchrun_complete"],
            "step-20": [".metadata"],
            "step-25": ["half-written.pt", ".torchrun_started"],  # abandoned save of ours
            "step-30": [".torchrun_complete"],
            "step-40": [".torchrun_complete"],
            "step-50": ["in-progress.pt", ".torchrun_started"],  # being written: above it
            "tensorboard": ["events.out"],  # the user's own directory: no step
            "step-1": ("link", f"../{OUTSIDE}/step-999"),
        },
    )
    plan = prune_plan(scan(root), 2)
    assert sorted(e.name for e in plan.remove) == ["step-10", "step-20", "step-25"] and plan.kept == []
    done = prune(plan.remove)
    assert sorted(done.removed) == ["step-10", "step-20", "step-25"] and done.failed == []
    assert {e.name for e in scan(root)} == {"step-30", "step-40", "step-50", "tensorboard"}
    assert (root / "step-1").is_symlink()
    assert tree_of(tmp_path / OUTSIDE) == {"step-999", "step-999/.torchrun_complete"}
    with pytest.raises(ValueError):
        prune_plan([], 0)


def test_retention_never_removes_what_it_cannot_prove_is_an_old_save(tmp_path: Path) -> None:
    """A user's complete directories without a step, a DeepSpeed directory (incomplete by our
    rules), an incomplete `step-N` nobody's helper started, and the Trainer's best checkpoint all
    stay, however many newer saves exist; the ones that are not a framework's are said."""
    root = tmp_path / "root"
    make(
        root,
        {
            "pretrained": [".metadata", "__0_0.distcp"],  # a DCP directory the user brought
            "best": [".torchrun_complete"],
            "global_step5": ["latest", "mp_rank_00_model_states.pt"],  # DeepSpeed's layout
            "step-6": ["half.pt"],  # incomplete, but not started by path_for: maybe the user's
            "checkpoint-10": ["trainer_state.json"],
            "checkpoint-20": ["trainer_state.json"],
            "checkpoint-30": ["trainer_state.json"],
            "checkpoint-40": ["trainer_state.json"],
        },
    )
    (root / "checkpoint-40" / "trainer_state.json").write_text(
        '{"best_model_checkpoint": "/ckpt/checkpoint-10"}'
    )
    entries = scan(root)
    protected, unread = kept_by_frameworks(entries)
    assert (protected, unread) == ({"checkpoint-10"}, [])
    plan = prune_plan(entries, 1, protected)
    assert [e.name for e in plan.remove] == ["checkpoint-30", "checkpoint-20"]
    assert [line.split(":")[0] for line in plan.kept] == ["kept global_step5", "kept step-6"]
    prune(plan.remove)
    assert {p.name for p in root.iterdir()} == {
        "pretrained", "best", "global_step5", "step-6", "checkpoint-10", "checkpoint-40"
    }  # fmt: skip

    (root / "checkpoint-40" / "trainer_state.json").write_text("{not json")
    protected, unread = kept_by_frameworks(scan(root))
    assert protected == {"checkpoint-10", "checkpoint-40"} and len(unread) == 1  # unreadable: keep all


def test_the_helper_marks_the_saves_it_starts_so_retention_may_remove_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(TOOLS_HELPER))
    monkeypatch.setenv("TORCHRUN_CHECKPOINT_DIR", str(tmp_path))
    helper = importlib.import_module("torchrun_checkpoint")
    path = helper.path_for(7)
    assert helper.path_for(7) == path  # a second rank: same directory, no error
    (tmp_path / "step-9").mkdir()
    helper.mark_complete(tmp_path / "step-9")
    entry = next(e for e in scan(tmp_path) if e.name == "step-7")
    assert entry.ours and not entry.complete
    assert [e.name for e in prune_plan(scan(tmp_path), 1).remove] == ["step-7"]


def test_retention_of_hostile_names_never_leaves_the_root(tmp_path: Path) -> None:
    make(tmp_path / OUTSIDE, {"step-999": [".torchrun_complete"], "keepme": ["data"]})
    root = tmp_path / "root"
    hostile = {
        "..step-1": [".torchrun_complete"],
        "step-2\n..": [".torchrun_complete", ("escape", f"../../{OUTSIDE}/keepme")],
        "step-3": [".torchrun_complete"],
        "step-4": [".torchrun_complete"],
    }
    make(root, hostile)
    done = prune(prune_plan(scan(root), 1).remove)
    assert sorted(done.removed) == ["step-3"]  # "step-2\n.." has no step: never removed
    assert tree_of(tmp_path / OUTSIDE) == {
        "step-999",
        "step-999/.torchrun_complete",
        "keepme",
        "keepme/data",
    }
    assert {p.name for p in root.iterdir()} == {"..step-1", "step-2\n..", "step-4"}


def test_a_checkpoint_that_vanishes_between_the_scan_and_the_start_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race made deterministic: the first scan is real, then the newest entry is deleted
    (as another writer would) before it is checked; the next newest is chosen and it is said."""
    root = tmp_path / "root"
    make(root, {"step-1": [".torchrun_complete"], "step-2": [".torchrun_complete"]})
    real_scan, calls = start_module.scan, []

    def scan_then_lose_the_newest(path: Path) -> list[Any]:
        found = real_scan(path)
        if not calls:
            (root / "step-2" / ".torchrun_complete").unlink()
            (root / "step-2").rmdir()
        calls.append(path)
        return found

    monkeypatch.setattr(start_module, "scan", scan_then_lose_the_newest)
    chosen = resume(root, attempt=3, keep=None, prunes=False)
    assert chosen.env == {"TORCHRUN_RESUME_FROM": str(root / "step-1")}
    report = chosen.report
    assert (report.resumed_from, report.step, report.attempt) == (str(root / "step-1"), 1, 3)
    assert len(report.problems) == 1 and "step-2 vanished" in report.problems[0]


def test_no_checkpoint_means_no_resume_variable(tmp_path: Path) -> None:
    chosen = resume(tmp_path / "none", attempt=0, keep=2, prunes=True)
    assert chosen.env == {}
    assert (chosen.report.latest, chosen.report.count) == (None, 0)


def test_the_report_round_trips_and_fits_a_termination_message() -> None:
    report = CheckpointReport(
        root="/ck", attempt=2, latest="/ck/step-4", step=4, time="2026-11-25T10:00:00Z", count=3,
        resumed_from="/ck/step-4", pruned=1, problems=tuple(f"problem {i} " + "x" * 300 for i in range(40)),
    )  # fmt: skip
    text = report.to_json()
    assert len(text.encode()) <= MAX_BYTES
    back = parse_report(text)
    assert back is not None and back.problems == report.problems[: len(back.problems)]
    assert back == CheckpointReport(**{**report.__dict__, "problems": back.problems})
    for garbage in ("", "not json", "[]", '{"result": "Synced"}', '{"result": "Prepared", "checkpoint": {}}'):
        assert parse_report(garbage) is None


def test_by_age_is_by_time_when_a_complete_name_has_no_step(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make(root, {"step-100": [".torchrun_complete"], "final": [".torchrun_complete"]})
    assert [e.name for e in by_age(scan(root))] == ["final", "step-100"]


def test_the_helper_marks_what_discovery_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun_checkpoint (shipped to the pods) and discovery agree on the marker."""
    monkeypatch.syspath_prepend(str(TOOLS_HELPER))
    torchrun_checkpoint = importlib.import_module("torchrun_checkpoint")

    monkeypatch.setenv("TORCHRUN_CHECKPOINT_DIR", str(tmp_path))
    path = torchrun_checkpoint.path_for(12)
    assert path.is_dir() and torchrun_checkpoint.path_for(12) == path  # created, and again is fine
    assert latest(scan(tmp_path)) is None
    torchrun_checkpoint.mark_complete(path)
    chosen = latest(scan(tmp_path))
    assert chosen is not None and (chosen.name, chosen.step, chosen.kind) == ("step-12", 12, "marker")


# Checkpoints the real frameworks wrote, whole and cut as a killed save leaves them:
# test_checkpoint_frameworks.py.
