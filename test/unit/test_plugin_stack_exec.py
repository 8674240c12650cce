"""`kubectl torchrun stack` runs, in each pod's reporter sidecar, the command that sidecar runs
(its pod spec's) plus `stack`: the module path is the pod's, so a plugin and pods made by another
controller version still agree on it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from jobspecs import job, queue, worker

from controller.plugin.stack import REPORTER, reporter_command


def test_the_exec_is_the_sidecar_command_the_pod_was_made_with() -> None:
    pod = worker(job(), queue(debug={"stackDumps": True}))
    sidecar = next(c for c in pod["spec"]["template"]["spec"]["initContainers"] if c["name"] == REPORTER)
    assert reporter_command(pod["spec"]["template"]) == sidecar["command"]
    # and that command with `stack` reaches the sidecar's stack dump (py-spy, or the line saying
    # the image lacks it), not an import error or a usage message
    done = subprocess.run(
        [sys.executable, *sidecar["command"][1:], "stack"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert "No module named" not in said and "usage" not in said.lower(), said
    assert done.returncode == 0 or "py-spy is not installed" in said, said


def test_a_pod_made_by_an_older_controller_gets_its_own_module_and_one_without_a_sidecar_none() -> None:
    old: dict[str, Any] = {
        "spec": {
            "initContainers": [
                {"name": "prepare", "command": ["python", "-m", "controller.sync", "prepare"]},
                {"name": REPORTER, "command": ["python", "-m", "controller.progress.reporter"]},
            ]
        }
    }
    assert reporter_command(old) == ["python", "-m", "controller.progress.reporter"]
    assert reporter_command({"spec": {"initContainers": old["spec"]["initContainers"][:1]}}) is None
    assert reporter_command(json.loads('{"spec": {}}')) is None
