"""`/opt/torchrun` in every worker pod: `sync prepare` fills it, `launch` starts torchrun through it
(controller/sync/prepare.py, controller/tools/launch, controller/torchrunjob/manifests/tools.py).

The launch script is run for real by /bin/sh with a Python program standing in for torchrun, so
what the program sees (its argv, its environment, its sys.path) is what torchrun would see."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jobspecs import job, queue, worker

from controller.sync.cli import main
from controller.sync.prepare import TOOLS, env_text, prepare_tools

SHOW = (
    "import json, os, sys; "
    "print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ), 'path': sys.path}))"
)
HOSTILE = "a b'c\"d $(touch /tmp/x) `id` \\ ; & \n end"


def launched(target: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `launch` from `target` the way the torchrun container does, with python for torchrun."""
    proc = subprocess.run(
        ["/bin/sh", str(target / "launch"), sys.executable, "-c", SHOW, *args],
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_prepare_copies_the_tools_and_the_launch_exports_the_env_file(tmp_path: Path) -> None:
    target = tmp_path / "opt"
    prepare_tools(target, {"TORCHRUN_RESUME_FROM": "/ckpt/step-20", "ODD": HOSTILE})
    assert (target / "launch").read_bytes() == (TOOLS / "launch").read_bytes()
    shipped = {p.name for p in (TOOLS / "python").glob("*.py")}
    assert shipped and {p.name for p in (target / "python").glob("*.py")} == shipped | {
        "torchrun_checkpoint_discovery.py"
    }
    assert not list(target.rglob("__pycache__"))
    seen = launched(target, "--node_rank=1", "two words", env={"PYTHONPATH": "/image/lib"})
    assert seen["argv"] == ["--node_rank=1", "two words"]
    assert seen["env"]["TORCHRUN_RESUME_FROM"] == "/ckpt/step-20"
    assert seen["env"]["ODD"] == HOSTILE  # quoted, never run
    assert seen["env"]["PYTHONPATH"] == f"{target}/python:/image/lib"
    assert seen["path"][1:3] == [f"{target}/python", "/image/lib"]


def test_prepare_leaves_the_mount_point_alone(tmp_path: Path) -> None:
    """The emptyDir's mount point is root's: copying its stat onto it failed with EPERM as a
    non-root user on the real node; its mode must stay whatever it was."""
    target = tmp_path / "opt"
    target.mkdir(mode=0o777)
    target.chmod(0o1777)
    prepare_tools(target, {})
    assert stat.S_IMODE(target.stat().st_mode) == 0o1777
    assert stat.S_IMODE((target / "launch").stat().st_mode) in (0o644, 0o755)
    assert stat.S_IMODE((target / "python").stat().st_mode) == 0o755


def test_the_launch_works_without_an_env_file_or_a_pythonpath(tmp_path: Path) -> None:
    target = tmp_path / "opt"
    prepare_tools(target, {})
    (target / "env").unlink()
    seen = launched(target)
    assert seen["env"]["PYTHONPATH"] == f"{target}/python"
    assert "TORCHRUN_RESUME_FROM" not in seen["env"]


def test_the_env_file_refuses_names_the_shell_cannot_export() -> None:
    assert env_text({"A_1": "x y"}) == "A_1='x y'\n"
    with pytest.raises(ValueError, match="not a shell variable name"):
        env_text({"A=B; rm -rf /": "x"})


def test_the_prepare_command_fills_its_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prepare", "--target", str(tmp_path / "t")], env={}) == 0
    assert (tmp_path / "t" / "launch").is_file() and (tmp_path / "t" / "env").is_file()
    assert capsys.readouterr().out.startswith("Prepared ")


@pytest.mark.parametrize("source", ["none", "upload"])
def test_every_worker_pod_starts_torchrun_through_the_tools(source: str) -> None:
    pod = worker(job(workspace={"source": source}), queue(), generation=0)["spec"]["template"]["spec"]
    first = pod["initContainers"][0]
    assert first["name"] == "prepare"
    assert first["volumeMounts"][0] == {"name": "torchrun-tools", "mountPath": "/opt/torchrun"}
    assert {"name": "torchrun-tools", "emptyDir": {}} in pod["volumes"]
    (container,) = pod["containers"]
    assert container["command"] == ["/bin/sh", "/opt/torchrun/launch", "torchrun"]
    assert container["args"][0].startswith("--nnodes=")
    mount = {"name": "torchrun-tools", "mountPath": "/opt/torchrun", "readOnly": True}
    assert mount in container["volumeMounts"]
    assert first["securityContext"] == container["securityContext"]


def test_after_an_in_place_restart_the_helper_rescans_with_the_shipped_rules(tmp_path: Path) -> None:
    """torchrun restarted the workers (a failure under --max_restarts, an elastic resize): the
    pod's start-time choice is old; the helper finds the newer checkpoint with the copy of
    controller/checkpoint/discovery.py that prepare shipped (run where `controller` is not
    importable, as in a user's image)."""
    target, root = tmp_path / "opt", tmp_path / "ck"
    prepare_tools(target, {})
    for step in (4, 8):
        (root / f"step-{step}").mkdir(parents=True)
        (root / f"step-{step}" / ".torchrun_complete").write_text("{}")
    (root / "step-12").mkdir()  # being written: incomplete
    show = "import torchrun_checkpoint as c; print(c.resume_from())"

    def resume(**env: str) -> str:
        base = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(target / "python"),
            "TORCHRUN_CHECKPOINT_DIR": str(root),
        }
        proc = subprocess.run(
            [sys.executable, "-c", show],
            env={**base, **env},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        return proc.stdout.strip()

    assert resume(TORCHRUN_RESUME_FROM=str(root / "step-4")) == str(root / "step-4")  # the pod's choice
    after = resume(TORCHRUN_RESUME_FROM=str(root / "step-4"), TORCHELASTIC_RESTART_COUNT="1")
    assert after == str(root / "step-8")
    assert (target / "python" / "torchrun_checkpoint_discovery.py").read_bytes() == (
        Path(__file__).resolve().parents[2] / "controller" / "checkpoint" / "discovery.py"
    ).read_bytes()
