"""The shipped image, built for real from the Dockerfile (SPEC §9) and run.

hack/testbed/build-image.sh builds the Dockerfile with Debian's buildah (no daemon: chroot
isolation, vfs storage) on a Debian bookworm base with Python 3.11 made here by mmdebstrap (no
registry serves python:3.11-slim), cached by a key of its inputs; hack/test.sh runs it before
pytest, so here it is normally a cache hit. The tests run the image's own entrypoint and the sync
program inside it as the image's user, through `buildah run`. When the image cannot be built, every
test here fails quoting why (never a skip: the shipped artefact would then be untested in silence).
The base stands in for python:3.11-slim: every test here is listed under it in the run's summary.
No control plane is needed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from summary_notes import IMAGE_BASE
from testbed import REPO

# every test runs the image, built on the local stand-in for python:3.11-slim (module docstring)
pytestmark = pytest.mark.stand_in(IMAGE_BASE)

SCRIPT = REPO / "hack" / "testbed" / "build-image.sh"
NON_ROOT = "65532"


@dataclass(frozen=True)
class Image:
    name: str
    storage: list[str]  # buildah's global flags for the storage the image is in
    facts: dict[str, str]  # the script's NAME=VALUE lines

    def buildah(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["buildah", *self.storage, *args], capture_output=True, text=True, timeout=300, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"buildah {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
        return proc

    def config(self) -> dict[str, Any]:
        """The OCI image config: user, entrypoint, environment."""
        inspected = json.loads(self.buildah("inspect", "--type", "image", self.name).stdout)
        config: dict[str, Any] = inspected["OCIv1"]["config"]
        return config


def build_failure(proc: subprocess.CompletedProcess[str]) -> str:
    """Why the build script failed: the end of its log (its last line says why)."""
    return (proc.stderr.strip() or f"exit code {proc.returncode}, nothing on stderr")[-3000:]


@pytest.fixture(scope="module")
def image() -> Image:
    try:
        proc = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=3600, check=False)
    except OSError as exc:
        pytest.fail(f"the image could not be built here: {SCRIPT} could not run: {exc}", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"the image could not be built here: {build_failure(proc)}", pytrace=False)
    facts = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    storage = ["--storage-driver", "vfs", "--root", facts["ROOT"], "--runroot", facts["RUNROOT"]]
    return Image(facts["IMAGE"], storage, facts)


@pytest.fixture(scope="module")
def container(image: Image) -> Iterator[str]:
    """A working container of the image, for `buildah run` (the image's user, env and workdir)."""
    name = image.buildah("from", "--quiet", image.name).stdout.strip()
    yield name
    image.buildah("rm", name, check=False)


def run(image: Image, container: str, *command: str) -> subprocess.CompletedProcess[str]:
    return image.buildah("run", "--isolation", "chroot", container, "--", *command, check=False)


def test_the_image_runs_as_a_numeric_non_root_user(
    image: Image, container: str, record_property: Callable[[str, object], None]
) -> None:
    # numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd
    assert image.config()["User"] == f"{NON_ROOT}:{NON_ROOT}"
    proc = run(image, container, "python", "-c", "import os; print(os.getuid(), os.getgid(), os.getcwd())")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [NON_ROOT, NON_ROOT, "/home/nonroot"]
    f = image.facts
    record_property(
        "note",
        f"{f['IMAGE']}: {f['SIZE']} uncompressed; cold build steps when they ran: "
        f"base (mmdebstrap + import) {f['BASE_SECONDS']} s, image (buildah build) {f['BUILD_SECONDS']} s",
    )


def test_the_entrypoint_prints_its_help(image: Image, container: str) -> None:
    entrypoint = image.config()["Entrypoint"]
    assert entrypoint == ["torchrun-controller"]
    proc = run(image, container, *entrypoint, "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: torchrun-controller") and "--kubeconfig" in proc.stdout, proc.stdout


def test_the_sync_program_prints_its_help(image: Image, container: str) -> None:
    # the sync pods run `python -m controller.sync` from this image: `python` is the venv's
    proc = run(image, container, "python", "-m", "controller.sync", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: python -m controller.sync"), proc.stdout


def test_what_the_sync_sources_call_is_in_the_image(image: Image, container: str) -> None:
    """The `git` source runs the git binary (over https or ssh), the `s3` source imports boto3
    (the `sync` extra): present and runnable as the image's user."""
    for command in (["git", "--version"], ["ssh", "-V"], ["python", "-c", "import boto3"]):
        proc = run(image, container, *command)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
