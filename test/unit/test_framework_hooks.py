"""The framework hooks of the worker pods (`controller/tools/python/sitecustomize.py` and
`torchrun_hooks.py`), in fresh interpreters laid out as a pod's (`prepare`'s directory first on
PYTHONPATH, the image's own directories after it).

The real Trainers are exercised on the real node (test/e2e/test_realnode_frameworks.py, torch 2.6
with transformers and lightning); here stand-in `transformers` and `lightning` packages — only the
names the hooks touch — show what the hooks guarantee whatever the framework does: nothing is
imported or patched until the program imports a Trainer; the image's own `sitecustomize` still
runs; the switch turns them off; a Trainer the hooks do not recognise runs unhooked with one line;
an HF Trainer resumes only from an HF checkpoint (real ones, from test/fixtures/checkpoints) and
never from a `step-N/` or a Lightning file; a program's own resume point wins.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from controller.sync.prepare import prepare_tools

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"

HF_STANDIN = {
    "transformers/__init__.py": """
        class TrainerCallback:
            pass
        """,
    "transformers/trainer.py": """
        class Args:
            output_dir = "/app/out"

        class Trainer:
            def __init__(self):
                self.args = Args()
                self.callbacks = []

            def add_callback(self, cb):
                self.callbacks.append(cb)

            def _get_output_dir(self, trial):
                return self.args.output_dir

            def train(self, resume_from_checkpoint=None, trial=None):
                return {"resume": resume_from_checkpoint, "checkpoints": self._get_output_dir(trial=None)}
        """,
}

LIGHTNING_STANDIN = {
    "lightning/__init__.py": "",
    "lightning/pytorch/__init__.py": "",
    "lightning/pytorch/callbacks/__init__.py": """
        class Callback:
            pass
        """,
    "lightning/pytorch/trainer/__init__.py": "",
    "lightning/pytorch/trainer/trainer.py": """
        class Trainer:
            def __init__(self, callbacks=None):
                self.callbacks = list(callbacks or [])

            def fit(self, model, train_dataloaders=None, val_dataloaders=None, datamodule=None,
                    ckpt_path=None):
                return {"ckpt_path": ckpt_path, "first_callback": type(self.callbacks[0]).__name__}
        """,
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


@pytest.fixture
def pod(tmp_path: Path) -> Path:
    """/opt/torchrun as `prepare` lays it out, an image directory with its own sitecustomize, and
    the stand-in frameworks."""
    prepare_tools(tmp_path / "torchrun", {})
    write_tree(tmp_path / "image", {"sitecustomize.py": "import os\nIMAGE_RAN = os.getpid()\n"})
    write_tree(tmp_path / "frameworks", HF_STANDIN | LIGHTNING_STANDIN)
    (tmp_path / "ckpt").mkdir()
    return tmp_path


def run(pod: Path, program: str, **env: str) -> tuple[dict[str, object], str]:
    """Run `program` as a rank of the pod does; it prints one JSON value as its last line."""
    path = os.pathsep.join(str(pod / d) for d in ("torchrun/python", "image", "frameworks"))
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": path, "TORCHRUN_CHECKPOINT_DIR": str(pod / "ckpt")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        env={**base, **env},
        capture_output=True, text=True, timeout=60, check=False, cwd=pod,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


STATE = """
    import json, sys
    site = sys.modules["sitecustomize"]
    hooked = [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "_Finder"]
    """


def with_state(program: str) -> str:
    """`program` after the lines that name what start-up left (`site`, `hooked`)."""
    return textwrap.dedent(STATE) + textwrap.dedent(program)


def test_the_image_s_own_sitecustomize_runs_and_nothing_is_imported_until_a_trainer_is(pod: Path) -> None:
    seen, err = run(
        pod,
        with_state(
            """
        print(json.dumps({"image": getattr(site, "IMAGE_RAN", None) is not None, "file": site.__file__,
                          "hooked": hooked,
                          "loaded": sorted(m for m in ("transformers", "lightning", "torchrun_checkpoint",
                                                       "torchrun_progress") if m in sys.modules)}))
        """
        ),
    )
    assert seen["image"] is True and str(seen["file"]).endswith("image/sitecustomize.py")
    assert seen["hooked"] == ["_Finder"]
    assert seen["loaded"] == []  # a program that uses no Trainer loads nothing of ours or theirs
    assert err == ""


def test_the_switch_turns_the_hooks_off_and_the_image_s_sitecustomize_still_runs(pod: Path) -> None:
    seen, _ = run(
        pod,
        with_state(
            """
        from transformers.trainer import Trainer
        print(json.dumps({"image": hasattr(site, "IMAGE_RAN"), "hooked": hooked,
                          "patched": getattr(Trainer, "_torchrun_hooked", False),
                          "result": Trainer().train()}))
        """
        ),
        TORCHRUN_FRAMEWORK_HOOKS="0",
        TORCHRUN_RESUME_FROM=str(FIXTURES / "hf" / "checkpoint-20"),
    )
    assert seen == {
        "image": True,
        "hooked": [],
        "patched": False,
        "result": {"resume": None, "checkpoints": "/app/out"},
    }


def test_an_error_in_the_image_s_sitecustomize_is_one_line_and_the_hooks_stay(pod: Path) -> None:
    (pod / "image" / "sitecustomize.py").write_text("raise RuntimeError('broken image hook')\n")
    seen, err = run(pod, with_state("print(json.dumps(hooked))"))
    assert seen == ["_Finder"]
    assert "Error in sitecustomize" in err and "broken image hook" in err


def hf_root(pod: Path, *names: str) -> Path:
    """The checkpoint root holding copies of the real HF checkpoints `names`."""
    root = pod / "ckpt"
    for name in names:
        shutil.copytree(FIXTURES / "hf" / name, root / name)
    return root


HF_TRAIN = """
    import json
    from transformers.trainer import Trainer
    t = Trainer()
    print(json.dumps({"result": t.train(*ARGS), "callbacks": [type(c).__name__ for c in t.callbacks]}))
    """


def hf(pod: Path, args: str = "", **env: str) -> tuple[dict[str, object], str]:
    return run(pod, HF_TRAIN.replace("ARGS", f"[{args}]"), **env)


def test_an_hf_trainer_resumes_from_the_chosen_hf_checkpoint_and_saves_checkpoints_on_the_volume(
    pod: Path,
) -> None:
    root = hf_root(pod, "checkpoint-10", "checkpoint-20")
    seen, err = hf(pod, TORCHRUN_RESUME_FROM=str(root / "checkpoint-20"))
    assert seen["result"] == {"resume": str(root / "checkpoint-20"), "checkpoints": str(root)}
    assert seen["callbacks"] == ["TorchrunCallback"]
    assert "Trainer resumes from" in err and f"Trainer checkpoints go to {root}" in err


def test_an_hf_trainer_is_never_handed_a_step_directory_or_a_lightning_file(pod: Path) -> None:
    root = hf_root(pod, "checkpoint-10")
    shutil.copytree(FIXTURES / "dcp" / "step-20", root / "step-20")
    seen, err = hf(pod, TORCHRUN_RESUME_FROM=str(root / "step-20"))
    assert seen["result"] == {"resume": None, "checkpoints": str(root)}
    assert "not resuming from step-20: it is not a hf checkpoint" in err
    lightning = next((FIXTURES / "lightning").glob("*step=*.ckpt"))
    shutil.copy(lightning, root / lightning.name)
    seen, _ = hf(pod, TORCHRUN_RESUME_FROM=str(root / lightning.name))
    assert seen["result"] == {"resume": None, "checkpoints": str(root)}


def test_an_hf_program_s_own_resume_point_wins_and_true_means_the_newest_on_the_volume(pod: Path) -> None:
    root = hf_root(pod, "checkpoint-10", "checkpoint-20")
    chosen = str(root / "checkpoint-20")
    seen, _ = hf(pod, "'/elsewhere/checkpoint-5'", TORCHRUN_RESUME_FROM=chosen)
    assert seen["result"] == {"resume": "/elsewhere/checkpoint-5", "checkpoints": str(root)}
    seen, _ = hf(pod, "False", TORCHRUN_RESUME_FROM=chosen)  # False: the program says "from scratch"
    assert seen["result"] == {"resume": False, "checkpoints": str(root)}
    seen, _ = hf(pod, "True")
    assert seen["result"] == {"resume": chosen, "checkpoints": str(root)}


def test_an_incomplete_hf_checkpoint_is_never_resumed_from(pod: Path) -> None:
    root = hf_root(pod, "checkpoint-20")
    (root / "checkpoint-20" / "trainer_state.json").unlink()  # a save killed before its last file
    seen, _ = hf(pod, TORCHRUN_RESUME_FROM=str(root / "checkpoint-20"))
    assert seen["result"] == {"resume": None, "checkpoints": str(root)}


def test_without_a_checkpoints_volume_an_hf_trainer_keeps_its_output_dir(pod: Path) -> None:
    seen, _ = hf(pod, TORCHRUN_CHECKPOINT_DIR="")
    assert seen["result"] == {"resume": None, "checkpoints": "/app/out"}


def test_a_lightning_trainer_gets_the_callback_first_and_resumes_only_from_a_lightning_file(
    pod: Path,
) -> None:
    root = pod / "ckpt"
    lightning = sorted((FIXTURES / "lightning").glob("*step=*.ckpt"))[-1]
    shutil.copy(lightning, root / lightning.name)
    shutil.copytree(FIXTURES / "hf" / "checkpoint-20", root / "checkpoint-20")
    program = """
        import json
        from lightning.pytorch.trainer.trainer import Trainer
        print(json.dumps(Trainer(callbacks=[object()]).fit(None, **KW)))
        """
    seen, _ = run(pod, program.replace("**KW", ""), TORCHRUN_RESUME_FROM=str(root / lightning.name))
    assert seen == {"ckpt_path": str(root / lightning.name), "first_callback": "TorchrunCallback"}
    seen, _ = run(pod, program.replace("**KW", "**{}"), TORCHRUN_RESUME_FROM=str(root / "checkpoint-20"))
    assert seen["ckpt_path"] is None
    seen, _ = run(
        pod, program.replace("**KW", "ckpt_path='last'"), TORCHRUN_RESUME_FROM=str(root / lightning.name)
    )
    assert seen["ckpt_path"] == "last"


def test_a_trainer_the_hooks_do_not_recognise_runs_unhooked_with_one_line(pod: Path) -> None:
    trainer = pod / "frameworks" / "transformers" / "trainer.py"
    trainer.write_text(trainer.read_text().replace("def _get_output_dir", "def _renamed_output_dir"))
    seen, err = run(
        pod,
        """
        import json
        from transformers.trainer import Trainer
        print(json.dumps(getattr(Trainer, "_torchrun_hooked", False)))
        """,
    )
    assert seen is False
    why = "AttributeError: Trainer has no _get_output_dir"
    assert err.strip().splitlines() == [f"torchrun hooks: transformers.trainer.Trainer left unhooked ({why})"]


def test_without_a_process_group_the_stop_vote_is_the_local_flag(pod: Path) -> None:
    seen, _ = run(
        pod,
        """
        import json, os, signal, torchrun_checkpoint as tc
        vote = tc.StopVote()
        before = vote.should_stop()
        os.kill(os.getpid(), signal.SIGTERM)
        print(json.dumps([before, vote.should_stop()]))
        """,
    )
    assert seen == [False, True]
