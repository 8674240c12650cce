"""Discovery and retention over checkpoints the real frameworks wrote (test/fixtures/checkpoints/,
made by hack/fixtures/make_checkpoints.py; who wrote each is in its manifest.json), whole and cut
the way a save killed midway leaves them: every whole one is found with its step, every cut one
is incomplete and never chosen, and retention never removes a DeepSpeed or step-less entry.

The cut copies are made here from the whole ones (`killed`), in each framework's save order
(docs/checkpoints.md): a file written in one stream keeps a prefix; a directory keeps the files
written before the kill, the one being written cut, and lacks those after. Layouts no real
framework wrote here (Megatron, Lightning's sharded directory) are tested in tests whose names say
`synthetic`: hand-made directories holding real torch.save / DCP files.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from controller.checkpoint import latest, prune, prune_plan, resume, scan
from controller.checkpoint.discovery import Entry, file_check, pickle_values
from controller.checkpoint.listing import listing
from controller.checkpoint.retention import kept_by_frameworks
from controller.sync.cli import main
from controller.sync.prepare import prepare_tools

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".pkl")
T0 = 1_700_000_000.0

# fixture root → {name: (kind, step)} of its complete entries, in the order the program wrote them
WHOLE: dict[str, dict[str, tuple[str, int | None]]] = {
    "dcp": {"pretrained": ("dcp", None), "step-10": ("dcp", 10), "step-20": ("dcp", 20)},
    "hf": {"checkpoint-10": ("hf", 10), "checkpoint-20": ("hf", 20)},
    "lightning": {
        "epoch=0-step=10.ckpt": ("lightning", 10),
        "epoch=0-step=20.ckpt": ("lightning", 20),
        "last.ckpt": ("lightning", None),
    },
    "torch_save": {"ckpt_500.pt": ("torch", 500), "ckpt_1000.pt": ("torch", 1000)},
    "torch_save/out": {"ckpt.pt": ("torch", None)},  # nanoGPT's out_dir
    "torch_legacy": {"ckpt_100.pt": ("torch", 100), "ckpt_200.pt": ("torch", 200)},  # pre-zip format
    "deepspeed": {"global_step10": ("deepspeed", 10), "global_step20": ("deepspeed", 20)},
    "accelerate/checkpoints": {"checkpoint_0": ("accelerate", 0), "checkpoint_1": ("accelerate", 1)},
}
LATEST = {
    "dcp": "step-20",  # pretrained/ was written first: by time, the newest save wins
    "hf": "checkpoint-20",
    "lightning": "last.ckpt",  # written after epoch=0-step=20.ckpt, the same state
    "torch_save": "ckpt_1000.pt",
    "torch_save/out": "ckpt.pt",
    "torch_legacy": "ckpt_200.pt",
    "deepspeed": "global_step20",
    "accelerate/checkpoints": "checkpoint_1",
}
# the file each kind writes last into a checkpoint directory (its completeness proof), and one
# written before it, cut: what a kill between the two leaves
LAST_WRITTEN = {
    "dcp": (".metadata", "__0_0.distcp"),
    "hf": ("trainer_state.json", "optimizer.pt"),
    "accelerate/checkpoints": ("random_states_0.pkl", "optimizer.bin"),
}


def copy_root(kind: str, dest: Path) -> Path:
    """The fixture root `kind`, copied (links kept as links) with mtimes in the order written."""
    shutil.copytree(FIXTURES / kind, dest, symlinks=True)
    for i, name in enumerate(WHOLE.get(kind, {})):
        for path in [dest / name, *(dest / name).rglob("*")]:
            os.utime(path, (T0 + i, T0 + i), follow_symlinks=False)
    return dest


def cut(path: Path, keep: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(keep)


def cut_points(size: int) -> list[int]:
    return sorted(
        {0, 1, 8, size // 4, size // 2, 3 * size // 4, size - 23, size - 22, size - 9, size - 1} - {size}
    )


def killed(kind: str, whole: Path, dest: Path) -> None:
    """`dest`: the save of `whole` killed midway, as its framework's save order leaves it."""
    if whole.is_file():
        shutil.copy2(whole, dest)
        cut(dest, whole.stat().st_size // 2)
        return
    shutil.copytree(whole, dest)
    if kind == "deepspeed":  # rank 1 still writing its optimizer shard
        cut(dest / "zero_pp_rank_1_mp_rank_00_optim_states.pt", 1000)
        return
    last, before = LAST_WRITTEN[kind]
    (dest / last).unlink()
    cut(dest / before, (dest / before).stat().st_size // 2)


def every_fixture_file() -> list[Path]:
    return sorted(
        p for p in FIXTURES.rglob("*") if p.is_file() and not p.is_symlink() and p.suffix in SUFFIXES
    )


def test_the_manifest_names_who_wrote_every_fixture_and_what_is_unproven() -> None:
    for kind in (
        "dcp",
        "hf",
        "lightning",
        "torch_save",
        "safetensors",
        "deepspeed",
        "accelerate",
        "torch_legacy",
    ):
        made = MANIFEST["kinds"][kind]
        assert made["written_by"]["torch"] and made["files"]
        assert all((FIXTURES / f).exists() for f in made["files"])
    assert MANIFEST["kinds"]["deepspeed"]["written_by"]["deepspeed"]
    assert "megatron" in MANIFEST["unproven"] and "megatron" not in MANIFEST["kinds"]


@pytest.mark.parametrize("kind", list(WHOLE))
def test_every_whole_checkpoint_is_found_with_its_step(tmp_path: Path, kind: str) -> None:
    root = copy_root(kind, tmp_path / "root")
    entries = scan(root)
    assert {e.name: (e.kind, e.step) for e in entries if e.complete} == WHOLE[kind]
    chosen = latest(entries)
    assert chosen is not None and chosen.name == LATEST[kind]
    assert resume(root, attempt=0, keep=None, prunes=False).env == {
        "TORCHRUN_RESUME_FROM": str(root / LATEST[kind])
    }


@pytest.mark.parametrize("path", every_fixture_file(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_file_is_complete_whole_and_incomplete_cut_anywhere(tmp_path: Path, path: Path) -> None:
    """Every torch.save (zip and legacy), safetensors and Lightning file the frameworks wrote
    (inside directories too), whole and cut at every interesting length: before, inside and just
    short of its end records."""
    assert file_check(str(path)) == (True, "")
    copy = tmp_path / path.name
    for keep in cut_points(path.stat().st_size):
        shutil.copy2(path, copy)
        cut(copy, keep)
        assert file_check(str(copy))[0] is False, keep


@pytest.mark.parametrize(
    "kind", ["dcp", "hf", "accelerate/checkpoints", "deepspeed", "lightning", "torch_save", "torch_legacy"]
)
def test_a_save_killed_midway_is_incomplete_and_never_chosen(tmp_path: Path, kind: str) -> None:
    """The newest save, killed midway, lies above every whole one: the whole newest is chosen."""
    root = copy_root(kind, tmp_path / "root")
    newest = LATEST[kind] if kind != "lightning" else "epoch=0-step=20.ckpt"
    name = {
        "dcp": "step-30", "hf": "checkpoint-30", "accelerate/checkpoints": "checkpoint_2",
        "deepspeed": "global_step30", "lightning": "epoch=0-step=30.ckpt", "torch_save": "ckpt_1500.pt",
        "torch_legacy": "ckpt_300.pt",
    }[kind]  # fmt: skip
    killed(kind, root / newest, root / name)
    if kind == "deepspeed":
        (root / "latest").write_text(name)  # rank 0 finished and moved `latest`; rank 1 had not
    if kind == "lightning":
        (root / "last.ckpt").unlink()  # its copy comes after the stepped file: not written yet
    entries = {e.name: e for e in scan(root)}
    assert entries[name].complete is False and entries[name].step is not None
    chosen = latest(list(entries.values()))
    assert chosen is not None and chosen.name == newest
    assert resume(root, attempt=1, keep=None, prunes=False).env["TORCHRUN_RESUME_FROM"] == str(root / newest)


def test_nanogpt_overwriting_its_one_file_and_killed_leaves_nothing_to_resume(tmp_path: Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    killed("torch_save", FIXTURES / "torch_save" / "out" / "ckpt.pt", root / "ckpt.pt")
    assert [(e.name, e.complete) for e in scan(root)] == [("ckpt.pt", False)]
    assert resume(root, attempt=1, keep=None, prunes=False).env == {}


def test_deepspeed_is_complete_only_as_far_as_latest_and_its_world(tmp_path: Path) -> None:
    """`latest` is written by rank 0 after its own files, without waiting for the others (0.14.4),
    so the world is read from the model states (2 ranks here) and every rank's shard checked."""
    root = copy_root("deepspeed", tmp_path / "root")
    assert pickle_values(str(root / "global_step20" / "mp_rank_00_model_states.pt"), ["dp_world_size"]) == {
        "dp_world_size": 2
    }
    (root / "latest").write_text("global_step10")  # killed before rank 0 moved it: 20 is a save in progress
    assert {e.name: e.complete for e in scan(root)} == {"global_step10": True, "global_step20": False}
    (root / "latest").write_text("global_step20")
    (root / "global_step20" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()  # rank 1 never wrote
    entry = next(e for e in scan(root) if e.name == "global_step20")
    assert not entry.complete and "1 of its world's files" in entry.note
    (root / "latest").unlink()
    assert [e for e in scan(root) if e.complete] == []


def test_legacy_torch_save_files_are_whole_exactly_when_every_storage_is_there(tmp_path: Path) -> None:
    """The pre-zip format ends in raw tensor bytes: the check reads its pickles' storage ids and
    sizes and wants the file to end where the last storage does — every cut, and one byte more,
    is incomplete, and said; a file with the legacy magic and nothing sound after it too."""
    whole = FIXTURES / "torch_legacy" / "ckpt_200.pt"
    copy = tmp_path / "ckpt_300.pt"
    size = whole.stat().st_size
    for keep in sorted({*range(0, size, 37), *range(size - 40, size)}):  # every storage's header and tail
        shutil.copy2(whole, copy)
        cut(copy, keep)
        assert file_check(str(copy))[0] is False, keep
    copy.write_bytes(whole.read_bytes() + b"\0")
    assert file_check(str(copy)) == (
        False,
        "legacy torch.save format: truncated, or a layout this check does not know",
    )
    copy.write_bytes(whole.read_bytes()[:17] + b"garbage" * 10)
    assert file_check(str(copy))[0] is False


def test_step_less_files_take_part_only_under_a_framework_name_or_beside_their_stepped_family(
    tmp_path: Path,
) -> None:
    """A user's `base_model.safetensors` (a real safetensors file) is never an entry, whatever is
    beside it; `model.safetensors` is one beside `model-step-10.safetensors`; `ckpt.pt` beside
    `ckpt_500.pt`; nanoGPT's `ckpt.pt` and Lightning's `last.ckpt` always."""
    safetensors = FIXTURES / "safetensors" / "model.safetensors"
    torch_file = FIXTURES / "torch_save" / "ckpt_500.pt"
    root = tmp_path / "root"
    root.mkdir()
    for name in ("base_model.safetensors", "model.safetensors"):
        shutil.copy(safetensors, root / name)
    shutil.copy(torch_file, root / "pretrained.pt")
    assert scan(root) == []
    shutil.copy(safetensors, root / "model-step-10.safetensors")
    shutil.copy(torch_file, root / "final_weights.bin")
    assert {(e.name, e.kind, e.step) for e in scan(root)} == {
        ("model-step-10.safetensors", "safetensors", 10), ("model.safetensors", "safetensors", None)
    }  # fmt: skip
    for name in ("ckpt.pt", "last.ckpt", "last-v1.ckpt"):
        shutil.copy(torch_file, root / name)
    assert {"ckpt.pt", "last.ckpt", "last-v1.ckpt"} <= {e.name for e in scan(root) if e.complete}
    assert "base_model.safetensors" not in {e.name for e in scan(root)}


def test_lightnings_last_link_is_followed_only_to_a_file_beside_it(tmp_path: Path) -> None:
    """save_last="link" writes `last.ckpt` → `epoch=0-step=20.ckpt` (a relative link): an entry
    as complete as its target. A link elsewhere, or under another name, is nothing."""
    root = copy_root("lightning", tmp_path / "root")
    outside = tmp_path / "outside.ckpt"
    shutil.copy(FIXTURES / "lightning" / "last.ckpt", outside)
    (root / "last.ckpt").unlink()
    (root / "last.ckpt").symlink_to("epoch=0-step=20.ckpt")
    (root / "last-v1.ckpt").symlink_to(outside)
    (root / "epoch=0-step=99.ckpt").symlink_to("../outside.ckpt")
    (root / "last-v2.ckpt").symlink_to("../root/epoch=0-step=20.ckpt")
    entries = {e.name: e for e in scan(root)}
    assert set(entries) == {"epoch=0-step=10.ckpt", "epoch=0-step=20.ckpt", "last.ckpt"}
    assert entries["last.ckpt"].complete and entries["last.ckpt"].step is None
    cut(root / "epoch=0-step=20.ckpt", 100)
    assert {e.name for e in scan(root) if e.complete} == {"epoch=0-step=10.ckpt"}


def test_lightning_sharded_directory_synthetic_layout_with_real_dcp_and_meta(tmp_path: Path) -> None:
    """Synthetic: Lightning's FSDP sharded save (a DCP directory, then rank 0's `meta.pt`) made by
    hand from the real DCP directory and a real torch.save file; no FSDP run wrote it here."""
    root = tmp_path / "root"
    root.mkdir()
    for step in (10, 20):
        shutil.copytree(FIXTURES / "dcp" / f"step-{step}", root / f"epoch=0-step={step}.ckpt")
        shutil.copy(FIXTURES / "torch_save" / "ckpt_500.pt", root / f"epoch=0-step={step}.ckpt" / "meta.pt")
    cut(root / "epoch=0-step=20.ckpt" / "meta.pt", 500)
    shutil.copytree(FIXTURES / "dcp" / "step-10", root / "epoch=0-step=30.ckpt")  # killed before meta.pt
    assert {e.name: (e.complete, e.step) for e in scan(root)} == {
        "epoch=0-step=10.ckpt": (True, 10),
        "epoch=0-step=20.ckpt": (False, 20),
        "epoch=0-step=30.ckpt": (False, 30),
    }


def test_megatron_synthetic_layout_with_real_torch_files(tmp_path: Path) -> None:
    """Synthetic (Megatron is unproven: no Megatron-LM run wrote these): `iter_<7 digits>/
    mp_rank_00/model_optim_rng.pt` made from a real torch.save file, and the tracker file."""
    root = tmp_path / "root"
    for it in (10, 20, 30):
        shard = root / f"iter_{it:07d}" / "mp_rank_00"
        shard.mkdir(parents=True)
        shutil.copy(FIXTURES / "torch_save" / "ckpt_500.pt", shard / "model_optim_rng.pt")
    (root / "latest_checkpointed_iteration.txt").write_text("20")
    dist = root / "iter_0000015"
    shutil.copytree(FIXTURES / "dcp" / "step-10", dist)
    (dist / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    cut(root / "iter_0000010" / "mp_rank_00" / "model_optim_rng.pt", 100)
    entries = {e.name: (e.complete, e.kind, e.step) for e in scan(root)}
    assert entries == {
        "iter_0000010": (False, None, 10), "iter_0000015": (True, "megatron", 15),
        "iter_0000020": (True, "megatron", 20), "iter_0000030": (False, None, 30),  # above the tracker
    }  # fmt: skip


def test_retention_over_the_real_frameworks_files_removes_only_old_stepped_saves(tmp_path: Path) -> None:
    """keep 1 in each framework's own root: the older stepped saves go; what has no step
    (`pretrained/`, `last.ckpt`, `ckpt.pt`), DeepSpeed's directories, a cut save nobody's helper
    started, and Lightning's best path (read from its checkpoint) stay."""
    removed: dict[str, list[str]] = {}
    for kind in ("dcp", "hf", "lightning", "torch_save", "deepspeed", "accelerate/checkpoints"):
        root = copy_root(kind, tmp_path / kind)
        if kind == "torch_save":
            shutil.copy2(root / "out" / "ckpt.pt", root / "ckpt.pt")  # nanoGPT's name, beside them
            killed(kind, root / "ckpt_500.pt", root / "ckpt_250.pt")  # an old cut save
        if kind == "lightning":  # a newer save whose state still names step=20 the best
            shutil.copy2(root / "epoch=0-step=20.ckpt", root / "epoch=0-step=30.ckpt")
            os.utime(root / "epoch=0-step=30.ckpt", (T0 + 9, T0 + 9))
        if kind == "deepspeed":
            killed(kind, root / "global_step10", root / "global_step5")
        entries = scan(root)
        protected, problems = kept_by_frameworks(entries)
        assert problems == []
        plan = prune_plan(entries, 1, protected)
        done = prune(plan.remove)
        assert done.failed == []
        removed[kind] = sorted(done.removed)
        if kind in ("torch_save", "deepspeed"):
            assert [line.split(":")[0] for line in plan.kept] == [
                "kept ckpt_250.pt" if kind == "torch_save" else "kept global_step5"
            ]
    assert removed == {
        "dcp": ["step-10"], "hf": ["checkpoint-10"], "lightning": ["epoch=0-step=10.ckpt"],
        "torch_save": ["ckpt_500.pt"], "deepspeed": [], "accelerate/checkpoints": ["checkpoint_0"],
    }  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "lightning").iterdir()) == [
        "epoch=0-step=20.ckpt", "epoch=0-step=30.ckpt", "last.ckpt"
    ]  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "torch_save").iterdir()) == [
        "ckpt.pt",
        "ckpt_1000.pt",
        "ckpt_250.pt",
        "out",
    ]
    assert sorted(p.name for p in (tmp_path / "deepspeed").iterdir()) == [
        "global_step10", "global_step20", "global_step5", "latest"
    ]  # fmt: skip
    assert (tmp_path / "dcp" / "pretrained").is_dir()


def test_lightnings_best_path_is_kept_and_an_unreadable_state_keeps_every_lightning_file(
    tmp_path: Path,
) -> None:
    root = copy_root("lightning", tmp_path / "root")
    assert kept_by_frameworks(scan(root)) == (frozenset({"epoch=0-step=20.ckpt"}), [])
    newest = root / "epoch=0-step=30.ckpt"
    shutil.copy2(root / "epoch=0-step=20.ckpt", newest)
    with zipfile.ZipFile(newest) as archive:  # garble its pickle; the zip's end records stay whole
        info = next(i for i in archive.infolist() if i.filename.endswith("/data.pkl"))
    with open(newest, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
        f.seek(info.header_offset + 30 + name_len + extra_len + 2)
        f.write(b"\xff" * 16)
    entries = scan(root)
    assert next(e for e in entries if e.name == newest.name).complete
    protected, problems = kept_by_frameworks(entries)
    assert {"epoch=0-step=10.ckpt", "epoch=0-step=20.ckpt", newest.name} <= protected
    assert len(problems) == 1 and "could not be read" in problems[0]
    assert prune_plan(entries, 1, protected).remove == []


def test_retention_removes_a_file_only_while_it_is_still_the_regular_file_it_chose(tmp_path: Path) -> None:
    root = copy_root("torch_save", tmp_path / "root")
    plan = prune_plan(scan(root), 1)
    assert [e.name for e in plan.remove] == ["ckpt_500.pt"]
    (root / "ckpt_500.pt").unlink()
    (root / "ckpt_500.pt").mkdir()  # replaced since the scan
    assert prune(plan.remove).removed == []
    assert (root / "ckpt_500.pt").is_dir()
    gone = Entry("ckpt_1.pt", root / "ckpt_1.pt", True, "torch", 1, T0, file=True)
    assert prune([gone]).removed == []


def test_the_listing_sizes_checkpoint_files(tmp_path: Path) -> None:
    root = copy_root("lightning", tmp_path / "root")
    sizes = {i.name: (i.bytes, i.complete, i.kind) for i in listing(root)}
    assert sizes["epoch=0-step=10.ckpt"] == (
        (FIXTURES / "lightning" / "epoch=0-step=10.ckpt").stat().st_size,
        True,
        "lightning",
    )
    assert next(i.name for i in listing(root)) == "last.ckpt"


@pytest.mark.parametrize(("kind", "chosen"), [("lightning", "last.ckpt"), ("deepspeed", "global_step20")])
def test_the_shipped_helper_chooses_the_frameworks_checkpoint_after_an_in_place_restart(
    tmp_path: Path, kind: str, chosen: str
) -> None:
    """`prepare` ships discovery.py alone beside torchrun_checkpoint (standard library only): run
    where `controller` is not importable, after torchrun restarted the workers, it names the
    framework's newest checkpoint — a file for Lightning."""
    target = tmp_path / "opt"
    prepare_tools(target, {})
    root = copy_root(kind, tmp_path / "ck")
    proc = subprocess.run(
        [sys.executable, "-c", "import torchrun_checkpoint as c; print(c.resume_from())"],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(target / "python"),
            "TORCHRUN_CHECKPOINT_DIR": str(root),
            "TORCHELASTIC_RESTART_COUNT": "1",
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == str(root / chosen)


def test_prepare_hands_every_rank_a_lightning_file_through_the_env_file(tmp_path: Path) -> None:
    """`epoch=0-step=20.ckpt` (a `=` in a value) survives the env file the launch sources."""
    root = copy_root("lightning", tmp_path / "ck")
    (root / "last.ckpt").unlink()
    assert main(["prepare", "--target", str(tmp_path / "t"), "--checkpoints", str(root)], env={}) == 0
    shown = subprocess.run(
        ["/bin/sh", "-c", '. "$1/env"; printf %s "$TORCHRUN_RESUME_FROM"', "sh", str(tmp_path / "t")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == str(root / "epoch=0-step=20.ckpt")


def test_files_a_check_reads_are_never_reached_through_a_link(tmp_path: Path) -> None:
    """A DeepSpeed model states file, a Lightning `meta.pt` or a Megatron shard directory that is
    a link (to a whole file, outside the root) makes the entry incomplete; the pickle reader does
    not follow it either."""
    outside = tmp_path / "outside"
    shutil.copytree(FIXTURES / "deepspeed" / "global_step20", outside / "global_step20")
    root = copy_root("deepspeed", tmp_path / "root")
    states = root / "global_step20" / "mp_rank_00_model_states.pt"
    states.unlink()
    states.symlink_to(outside / "global_step20" / "mp_rank_00_model_states.pt")
    assert {e.name: e.complete for e in scan(root)} == {"global_step10": True, "global_step20": False}
    assert pickle_values(str(states), ["dp_world_size"]) is None
    sharded = tmp_path / "lightning" / "epoch=0-step=10.ckpt"
    shutil.copytree(FIXTURES / "dcp" / "step-10", sharded)
    (sharded / "meta.pt").symlink_to(FIXTURES / "torch_save" / "ckpt_500.pt")
    assert [e.complete for e in scan(sharded.parent)] == [False]
    megatron = tmp_path / "megatron"
    (megatron / "iter_0000010").mkdir(parents=True)
    (outside / "mp_rank_00").mkdir()
    shutil.copy(FIXTURES / "torch_save" / "ckpt_500.pt", outside / "mp_rank_00" / "model_optim_rng.pt")
    (megatron / "iter_0000010" / "mp_rank_00").symlink_to(outside / "mp_rank_00")
    (megatron / "latest_checkpointed_iteration.txt").write_text("10")
    assert [e.complete for e in scan(megatron)] == [False]
