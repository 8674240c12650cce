"""The sync program's `git`, `s3` and `pvc` sources, run as the sync pod runs them: the real
command line (`python -m controller.sync fetch --source ...`) in its own process, with the
workspace, the termination log, the source claim and the Secret's files in temp directories, and
each result read back from what it left there (generation, marker, CURRENT, `<G>.failed`,
termination message). No Kubernetes is needed.

The servers are real processes on loopback, started once per module, waited for (each is polled
until it answers a real request) and stopped afterwards:
- `git daemon` serving bare repositories made here (git://);
- `git http-backend` behind a small HTTP server with basic auth that this module writes and runs
  with the same Python (the authenticated case: git sends credentials only after a 401);
- moto's S3 server (`python -m moto.server`, the `moto[server]` test extra), with its IAM
  authentication switched on once the fixtures are in place, so unknown keys, wrong secrets and a
  user without a policy are really refused. moto stands in for Amazon S3: every s3 test is listed
  under it in the run's summary ("stand-ins", test/summary_notes.py).
Not covered by a server here: logging in over ssh with a key (no sshd on this machine). The ssh
tests check the wiring instead: the command git is given, the private copy of the key that ssh's
own loader accepts (and the Secret's group-readable file it refuses), no prompt, and ssh's own
error in the message.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import socket
import stat
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from summary_notes import AMAZON_S3
from testbed import REPO, wait_until

from controller.sync import layout
from controller.sync.errors import SyncError
from controller.sync.limits import Limits
from controller.sync.sources import git as git_source
from controller.sync.sources import pvc as pvc_source

# -- running the sync program ----------------------------------------------------------------------


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    workspace: Path
    termination: dict[str, Any]


def sync_fetch(tmp_path: Path, generation: int, *args: str, **env: str) -> Run:
    """`python -m controller.sync fetch --generation G <args>` with the workspace, termination
    log and Secret directory under `tmp_path` (an empty Secret unless `env` names another)."""
    workspace = tmp_path / "workspace"
    termination = tmp_path / f"termination-{generation}"
    termination.unlink(missing_ok=True)
    no_secret = tmp_path / "no-secret"
    no_secret.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TORCHRUN_", "GIT_"))}
    full_env = {
        **base,
        layout.ENV_WORKSPACE: str(workspace),
        layout.ENV_TERMINATION_LOG: str(termination),
        layout.ENV_SOURCE_SECRET_DIR: str(no_secret),
        layout.ENV_SOURCE_DIR: str(tmp_path / "no-claim"),
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "controller.sync", "fetch", "--generation", str(generation), *args],
        env=full_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    message = json.loads(termination.read_text()) if termination.exists() else {}
    return Run(proc.returncode, proc.stdout, proc.stderr, workspace, message)


def no_temp_dirs(workspace: Path) -> None:
    gens = layout.generations_dir(workspace)
    leftovers = [p.name for p in gens.iterdir() if p.name.startswith(layout.TMP_PREFIX)]
    assert leftovers == [], f"temporary directories left behind: {leftovers}"


def assert_synced(run: Run, generation: int, source: str) -> Path:
    """Generation G is published (tree, marker, CURRENT) and the termination message says so."""
    assert run.code == 0, run.stderr
    gen = layout.generation_dir(run.workspace, generation)
    marker = json.loads((gen / layout.MARKER).read_text())
    assert marker["generation"] == generation and marker["source"] == source, marker
    assert layout.read_current(run.workspace) == generation
    expected = {"result": "Synced", "generation": generation, "source": source}
    expected |= {"files": marker["files"], "bytes": marker["bytes"]}
    if marker["sha256"] is not None:
        expected["sha256"] = marker["sha256"]
    assert run.termination == expected
    assert not layout.failed_path(run.workspace, generation).exists()
    no_temp_dirs(run.workspace)
    return gen


def assert_failed(run: Run, generation: int, reason: str, *fragments: str) -> str:
    """Generation G is refused with `reason` everywhere it shows, and left nothing; the message
    (returned) contains each of `fragments`."""
    assert run.code == 1, (run.stdout, run.stderr)
    assert run.termination["result"] == "Failed", run.termination
    assert (run.termination["generation"], run.termination["reason"]) == (generation, reason), run.termination
    message: str = run.termination["message"]
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message
    assert run.stderr.strip().splitlines()[-1] == f"{reason}: {message}"
    recorded = json.loads(layout.failed_path(run.workspace, generation).read_text())
    assert recorded == {"reason": reason, "message": message}
    assert not layout.generation_dir(run.workspace, generation).exists()
    assert layout.read_current(run.workspace) is None
    no_temp_dirs(run.workspace)
    return message


def tree(root: Path) -> dict[str, str]:
    """Every entry under `root` but the marker: file → content, dir → "/", symlink → "-> target"."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == layout.MARKER:
            continue
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "/"
        else:
            out[rel] = path.read_text()
    return out


def data_bytes(entries: dict[str, str]) -> int:
    """Bytes of file data in a `tree()`: what the marker counts."""
    return sum(len(v.encode()) for v in entries.values() if v != "/" and not v.startswith("-> "))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"the server exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}"
            )
        return True

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start(command: list[str], log: Path, **kwargs: Any) -> Server:
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, **kwargs)
    return Server(proc, log)


# -- git: repositories and the two servers -------------------------------------------------------

GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
USER, PASSWORD = "trainer", "s3cret-Pa55"


def git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        env=GIT_ENV,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return proc.stdout.strip()


@dataclass
class Repos:
    root: Path  # served directory: <name>.git
    tags: dict[str, str]  # name -> commit id
    trees: dict[str, dict[str, str]]  # commit id -> expected tree


def commit_tree(work: Path, files: dict[str, str], message: str) -> str:
    for name, content in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content.startswith("-> "):
            path.unlink(missing_ok=True)
            path.symlink_to(content[3:])
        else:
            path.write_text(content)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", message, cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Repos:
    """`project.git`: main (c1 tagged v1, then c2), branch feature (c1 + c3); `escape.git`: a
    symlink out of the tree."""
    root = tmp_path_factory.mktemp("served")
    work = tmp_path_factory.mktemp("work") / "project"
    git("init", "-q", "-b", "main", str(work))
    first = {
        "train.py": "print('v1')\n",
        "pkg/model.py": "W = 1\n",
        "run.sh": "#!/bin/sh\n",
        "latest": "-> train.py",
    }
    c1 = commit_tree(work, first, "first")
    (work / "run.sh").chmod(0o755)
    git("update-index", "--chmod=+x", "run.sh", cwd=work)
    git("commit", "-q", "--amend", "--no-edit", cwd=work)
    c1 = git("rev-parse", "HEAD", cwd=work)
    git("tag", "-a", "v1", "-m", "release 1", cwd=work)
    git("checkout", "-q", "-b", "feature", cwd=work)
    c3 = commit_tree(work, {"feature.py": "F = 3\n"}, "feature")
    git("checkout", "-q", "main", cwd=work)
    c2 = commit_tree(work, {"train.py": "print('v2')\n"}, "second")
    git("clone", "-q", "--bare", str(work), str(root / "project.git"))

    base = {"train.py": "print('v1')\n", "pkg": "/", "pkg/model.py": "W = 1\n", "run.sh": "#!/bin/sh\n"}
    base["latest"] = "-> train.py"
    trees = {c1: base, c2: {**base, "train.py": "print('v2')\n"}, c3: {**base, "feature.py": "F = 3\n"}}

    evil = tmp_path_factory.mktemp("work") / "escape"
    git("init", "-q", "-b", "main", str(evil))
    commit_tree(evil, {"ok.txt": "fine\n", "passwd": "-> ../../../../etc/passwd"}, "escape")
    git("clone", "-q", "--bare", str(evil), str(root / "escape.git"))
    return Repos(root, {"c1": c1, "c2": c2, "c3": c3}, trees)


@pytest.fixture(scope="module")
def git_daemon(repos: Repos, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`git daemon` on a free loopback port; yields its base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("logs") / "git-daemon.log"
    command = ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={repos.root}"]
    server = start([*command, "--listen=127.0.0.1", f"--port={port}", str(repos.root)], log, env=GIT_ENV)
    url = f"git://127.0.0.1:{port}"

    def answers() -> bool:
        probe = subprocess.run(
            ["git", "ls-remote", f"{url}/project.git"], env=GIT_ENV, capture_output=True, check=False
        )
        return server.alive() and probe.returncode == 0

    try:
        wait_until(answers, timeout=30, message="git daemon to serve")
        yield url
    finally:
        server.stop()


# A CGI gateway for `git http-backend` with HTTP basic auth: the authenticated git server.
# http.server's own CGIHTTPRequestHandler is deprecated and cannot do auth, hence these lines.
GIT_HTTP_SERVER = textwrap.dedent(
    """
    import base64, os, subprocess, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    port, root, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    EXPECTED = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.serve()

        def do_POST(self):
            self.serve()

        def serve(self):
            if self.headers.get("Authorization") != EXPECTED:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.body()
            env = {
                "PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": root, "GIT_HTTP_EXPORT_ALL": "1",
                "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                "REQUEST_METHOD": self.command, "PATH_INFO": path, "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": user, "REMOTE_ADDR": self.client_address[0],
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            }
            out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
            sep = b"\\r\\n\\r\\n" if b"\\r\\n\\r\\n" in out else b"\\n\\n"
            head, _, payload = out.partition(sep)
            status, headers = 200, []
            for line in head.decode().splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def body(self):
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


@pytest.fixture(scope="module")
def git_http(repos: Repos, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`git http-backend` behind basic auth (USER, PASSWORD) on a free loopback port; its base URL."""
    scratch = tmp_path_factory.mktemp("git-http")
    script = scratch / "git_http_server.py"
    script.write_text(GIT_HTTP_SERVER)
    port = free_port()
    command = [sys.executable, str(script), str(port), str(repos.root), USER, PASSWORD]
    server = start(command, scratch / "server.log")
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        server.alive()
        try:
            urllib.request.urlopen(f"{url}/project.git/info/refs?service=git-upload-pack", timeout=5)
        except urllib.error.HTTPError as e:
            return e.code == 401  # up, and asking for credentials
        except OSError:
            return False
        raise AssertionError("the git HTTP server answered without asking for credentials")

    try:
        wait_until(answers, timeout=30, message="the git HTTP server to answer")
        yield url
    finally:
        server.stop()


def secret(tmp_path: Path, files: dict[str, str]) -> Path:
    """The git source's Secret as the sync pod sees it: one file per key."""
    directory = tmp_path / "secret"
    directory.mkdir()
    for name, content in files.items():
        (directory / name).write_text(content)
    return directory


# -- git -------------------------------------------------------------------------------------------


def test_git_default_branch_is_published_without_its_git_directory(
    tmp_path: Path, git_daemon: str, repos: Repos
) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", f"{git_daemon}/project.git")
    gen = assert_synced(run, 0, "git")
    c2 = repos.tags["c2"]
    assert tree(gen) == repos.trees[c2]
    assert not (gen / ".git").exists()
    assert mode(gen / "run.sh") & 0o111 and not mode(gen / "train.py") & 0o111
    assert f"at commit {c2}" in run.stdout
    marker = json.loads((gen / layout.MARKER).read_text())
    assert (marker["files"], marker["bytes"]) == (len(repos.trees[c2]), data_bytes(repos.trees[c2]))


@pytest.mark.parametrize(
    ("ref", "commit"),
    [
        ("main", "c2"),
        ("feature", "c3"),
        ("v1", "c1"),
        ("refs/heads/feature", "c3"),
        ("<c1>", "c1"),  # a full commit id that is no branch's tip: fetched shallowly (protocol v2)
        ("<c1:10>", "c1"),  # an abbreviated id cannot be fetched by name: the full-fetch fallback
    ],
)
def test_git_ref_selects_the_tree(
    tmp_path: Path, git_daemon: str, repos: Repos, ref: str, commit: str
) -> None:
    sha = repos.tags[commit]
    wanted = sha if ref == "<c1>" else sha[:10] if ref == "<c1:10>" else ref
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", f"{git_daemon}/project.git", "--ref", wanted)
    gen = assert_synced(run, 0, "git")
    assert tree(gen) == repos.trees[sha]
    assert f"at commit {sha}" in run.stdout


def test_git_a_second_generation_fetches_again_and_becomes_current(
    tmp_path: Path, git_daemon: str, repos: Repos
) -> None:
    url = f"{git_daemon}/project.git"
    assert_synced(sync_fetch(tmp_path, 0, "--source", "git", "--url", url, "--ref", "v1"), 0, "git")
    run = sync_fetch(tmp_path, 1, "--source", "git", "--url", url, "--ref", "main")
    assert_synced(run, 1, "git")
    assert tree(layout.generation_dir(run.workspace, 0)) == repos.trees[repos.tags["c1"]]
    assert tree(layout.generation_dir(run.workspace, 1)) == repos.trees[repos.tags["c2"]]


def test_git_unknown_ref_is_git_fetch_failed(tmp_path: Path, git_daemon: str) -> None:
    url = f"{git_daemon}/project.git"
    run = sync_fetch(tmp_path, 3, "--source", "git", "--url", url, "--ref", "no-such-branch")
    assert_failed(run, 3, "GitFetchFailed", url, "couldn't find remote ref no-such-branch")


def test_git_unknown_commit_id_is_git_fetch_failed(tmp_path: Path, git_daemon: str) -> None:
    url = f"{git_daemon}/project.git"
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", url, "--ref", "deadbeef" * 5)
    assert_failed(run, 0, "GitFetchFailed", url, "deadbeef")


def test_git_missing_repository_is_git_fetch_failed(tmp_path: Path, git_daemon: str) -> None:
    url = f"{git_daemon}/no-such-project.git"
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", url)
    assert_failed(run, 0, "GitFetchFailed", url, "not exported")


def test_git_unreachable_server_is_git_fetch_failed(tmp_path: Path) -> None:
    url = f"git://127.0.0.1:{free_port()}/project.git"  # nothing listens there
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", url)
    assert_failed(run, 0, "GitFetchFailed", url, "unable to connect", "Connection refused")


def test_git_tree_is_held_to_the_limits(tmp_path: Path, git_daemon: str) -> None:
    url = f"{git_daemon}/project.git"
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", url, "--max-files", "3")
    assert_failed(run, 0, "ArchiveTooLarge", "more than 3 entries")
    run = sync_fetch(tmp_path / "bytes", 0, "--source", "git", "--url", url, "--max-bytes", "10")
    assert_failed(run, 0, "ArchiveTooLarge", "more than 10 bytes")


def test_git_symlink_out_of_the_tree_is_refused(tmp_path: Path, git_daemon: str) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", f"{git_daemon}/escape.git")
    assert_failed(run, 0, "InvalidArchive", "passwd", "leaves the tree")


def test_git_over_http_with_basic_auth_from_the_secret(tmp_path: Path, git_http: str, repos: Repos) -> None:
    # the password file ends in a newline, as `kubectl create secret --from-file` often leaves it
    auth = secret(tmp_path, {"username": USER, "password": PASSWORD + "\n"})
    url = f"{git_http}/project.git"
    run = sync_fetch(
        tmp_path, 0, "--source", "git", "--url", url, "--ref", "feature", TORCHRUN_SOURCE_SECRET_DIR=str(auth)
    )
    gen = assert_synced(run, 0, "git")
    assert tree(gen) == repos.trees[repos.tags["c3"]]


def test_git_over_http_refuses_a_wrong_password_without_showing_it(tmp_path: Path, git_http: str) -> None:
    auth = secret(tmp_path, {"username": USER, "password": "not-the-password"})
    url = f"{git_http}/project.git"
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", url, TORCHRUN_SOURCE_SECRET_DIR=str(auth))
    message = assert_failed(run, 0, "GitFetchFailed", url, "Authentication failed")
    assert "not-the-password" not in message + run.stdout + run.stderr


def test_git_over_http_without_credentials_never_prompts(tmp_path: Path, git_http: str) -> None:
    url = f"{git_http}/project.git"
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", url)  # an empty Secret directory
    assert_failed(run, 0, "GitFetchFailed", url, "terminal prompts disabled")


def test_git_credentials_in_the_url_never_reach_the_message(tmp_path: Path, git_http: str) -> None:
    port = git_http.rpartition(":")[2]
    url = f"http://{USER}:leaked-token@127.0.0.1:{port}/project.git"
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", url)
    message = assert_failed(run, 0, "GitFetchFailed", f"http://127.0.0.1:{port}/project.git")
    assert "leaked-token" not in message + run.stdout + run.stderr


class _StallingGitServer(BaseHTTPRequestHandler):
    """Asks for credentials, then holds the authenticated request until `release` is set and
    closes it unanswered: a git fetch caught mid-flight."""

    authenticated = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:
        if not self.headers.get("Authorization"):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.authenticated.set()
        self.release.wait(60)
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


def process_texts() -> Iterator[tuple[int, str, bytes]]:
    """(pid, "cmdline" or "environ", content) of every process this test may read."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            for what in ("cmdline", "environ"):
                try:
                    yield int(proc.name), what, (proc / what).read_bytes()
                except OSError:  # gone, or not ours to read
                    continue


def test_git_password_is_in_no_process_list_or_environment(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StallingGitServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    password = "pw-that-must-not-show-" + os.urandom(4).hex()
    auth = secret(tmp_path, {"username": USER, "password": password})
    url = f"http://127.0.0.1:{server.server_address[1]}/project.git"
    try:
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(
                sync_fetch, tmp_path, 0, "--source", "git", "--url", url, TORCHRUN_SOURCE_SECRET_DIR=str(auth)
            )
            assert _StallingGitServer.authenticated.wait(60), "git never sent its credentials"
            # git is now waiting on the server, with the credentials it was given
            leaks = [(pid, what) for pid, what, text in process_texts() if password.encode() in text]
            _StallingGitServer.release.set()
            result = run.result(timeout=120)
    finally:
        _StallingGitServer.release.set()
        server.shutdown()
        server.server_close()
    assert leaks == [], f"the password shows in {leaks}"
    assert_failed(result, 0, "GitFetchFailed", url)


def test_git_that_hangs_is_stopped_at_the_deadline(tmp_path: Path) -> None:
    """A server that accepts the connection and never answers: git and its helpers are killed
    when the deadline passes (the CLI's deadline is 15 minutes, so this calls the source itself)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes the handshake; nothing ever reads or answers
        url = f"git://127.0.0.1:{listener.getsockname()[1]}/project.git"
        dest = tmp_path / "dest"
        dest.mkdir()
        started = time.monotonic()
        with pytest.raises(SyncError) as refused:
            git_source.checkout(dest, url, None, Limits(), secret_dir=tmp_path, env=os.environ, timeout=3)
        took = time.monotonic() - started
    assert (refused.value.reason, refused.value.message) == (
        "GitFetchFailed",
        f"{url}: git did not finish in time",
    )
    assert took < 30, took


def ssh_key(tmp_path: Path) -> tuple[str, str]:
    """A new ed25519 key pair: (private, public) in OpenSSH format."""
    keys = tmp_path / "keys"
    keys.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id")], check=True, timeout=30
    )
    return (keys / "id").read_text(), (keys / "id.pub").read_text()


def test_git_over_ssh_reports_ssh_errors_without_prompting(tmp_path: Path) -> None:
    private, _ = ssh_key(tmp_path)
    auth = secret(tmp_path, {"ssh-privatekey": private})
    url = f"ssh://git@127.0.0.1:{free_port()}/project.git"  # no sshd here: nothing listens
    run = sync_fetch(tmp_path, 0, "--source", "git", "--url", url, TORCHRUN_SOURCE_SECRET_DIR=str(auth))
    assert_failed(run, 0, "GitFetchFailed", "ssh://127.0.0.1:", "Connection refused")


@pytest.mark.parametrize("known_hosts", [False, True])
def test_git_ssh_key_is_used_from_a_private_copy_removed_afterwards(
    tmp_path: Path, known_hosts: bool
) -> None:
    """No sshd here to log in to, so this checks the wiring: the ssh command git gets, and that
    ssh's own key loader accepts the copy where it refuses the Secret's group-readable file."""
    private, public = ssh_key(tmp_path)
    pinned = "[git.example.com]:22 " + public
    auth = secret(tmp_path, {"ssh-privatekey": private} | ({"known_hosts": pinned} if known_hosts else {}))
    original = auth / "ssh-privatekey"
    original.chmod(0o440)  # the sync pod's Secret volume mode
    refused = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(original)], capture_output=True, text=True, check=False
    )
    assert refused.returncode != 0 and "UNPROTECTED PRIVATE KEY FILE" in refused.stderr
    with git_source.git_environment(auth, {"PATH": os.environ["PATH"]}) as env:
        ssh = shlex.split(env["GIT_SSH_COMMAND"])
        options = dict(ssh[i + 1].split("=", 1) for i, word in enumerate(ssh) if word == "-o")
        copy = Path(ssh[ssh.index("-i") + 1])
        assert copy.read_text() == private and mode(copy) == 0o600
        derived = subprocess.run(
            ["ssh-keygen", "-y", "-f", str(copy)], capture_output=True, text=True, check=True
        )
        assert derived.stdout.split()[:2] == public.split()[:2]
        assert (options["BatchMode"], options["IdentitiesOnly"]) == ("yes", "yes")
        if known_hosts:
            assert options["StrictHostKeyChecking"] == "yes"
            assert options["UserKnownHostsFile"] == str(auth / "known_hosts")
        else:
            assert options["StrictHostKeyChecking"] == "accept-new"
            assert Path(options["UserKnownHostsFile"]).parent == copy.parent
        assert env["GIT_TERMINAL_PROMPT"] == "0"
        helpers = [
            env[f"GIT_CONFIG_VALUE_{i}"]
            for i in range(int(env["GIT_CONFIG_COUNT"]))
            if env[f"GIT_CONFIG_KEY_{i}"] == "credential.helper"
        ]
        assert helpers == [""], "no username/password in the Secret: inherited helpers dropped, none added"
    assert not copy.exists() and not copy.parent.exists()


# -- s3: moto's server ---------------------------------------------------------------------------

BUCKET = "torchrun-code"
CODE = {"train.py": ("print('s3')\n", 0o755), "pkg/model.py": ("W = 2\n", 0o644)}


def archive(
    entries: dict[str, tuple[str, int]], *, gz: bool = True, names: dict[str, str] | None = None
) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tar:
        for name, (content, perm) in entries.items():
            info = tarfile.TarInfo((names or {}).get(name, name))
            data = content.encode()
            info.size, info.mode = len(data), perm
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class S3:
    endpoint: str
    reader: tuple[str, str]  # access key id, secret of a user allowed s3:*
    nobody: tuple[str, str]  # a user with no policy
    objects: dict[str, bytes]

    def env(self, keys: tuple[str, str] | None = None, endpoint: str | None = None) -> dict[str, str]:
        key_id, key_secret = keys or self.reader
        return {
            "AWS_ACCESS_KEY_ID": key_id,
            "AWS_SECRET_ACCESS_KEY": key_secret,
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_REGION": "us-east-1",
        }


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """moto's S3 server with the bucket filled, two IAM users, then authentication switched on."""
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    log = tmp_path_factory.mktemp("logs") / "moto.log"
    server = start([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], log)
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        server.alive()
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        wait_until(answers, timeout=60, message="moto's server to answer")
        setup = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        setup |= {"aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
        client, iam = boto3.client("s3", **setup), boto3.client("iam", **setup)
        objects = {
            "releases/v1.tar.gz": archive(CODE),
            "releases/v1.tgz": archive(CODE),
            "releases/v1.tar": archive(CODE, gz=False),
            "releases/evil.tar.gz": archive({"../outside.txt": ("x", 0o644)}),
            "releases/empty.tar.gz": archive({}),
            "tree/train.py": b"print('s3')\n",
            "tree/pkg/model.py": b"W = 2\n",
            "tree/empty/": b"",
            "hostile/../outside.txt": b"x",
            "clash/a": b"file",
            "clash/a/b": b"under the file",
            "reserved/.sync_success": b"{}",
            "absolute//etc/x": b"x",
        }
        client.create_bucket(Bucket=BUCKET)
        for key, body in objects.items():
            client.put_object(Bucket=BUCKET, Key=key, Body=body)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        keys = {}
        for user in ("reader", "nobody"):
            iam.create_user(UserName=user)
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
        iam.put_user_policy(UserName="reader", PolicyName="s3", PolicyDocument=json.dumps(policy))
        # from here on moto checks every request's signature and IAM policy
        request = urllib.request.Request(
            f"{endpoint}/moto-api/reset-auth",
            data=b"0",
            headers={"Content-Type": "text/plain"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()
        yield S3(endpoint, keys["reader"], keys["nobody"], objects)
    finally:
        server.stop()


@pytest.mark.stand_in(AMAZON_S3)
@pytest.mark.parametrize("key", ["releases/v1.tar.gz", "releases/v1.tgz", "releases/v1.tar"])
def test_s3_archive_object_is_extracted(tmp_path: Path, s3: S3, key: str) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "s3", "--uri", f"s3://{BUCKET}/{key}", **s3.env())
    gen = assert_synced(run, 0, "s3")
    assert tree(gen) == {"train.py": "print('s3')\n", "pkg": "/", "pkg/model.py": "W = 2\n"}
    assert mode(gen / "train.py") == 0o755 and mode(gen / "pkg/model.py") == 0o644
    digest = hashlib.sha256(s3.objects[key]).hexdigest()
    assert digest in run.stdout
    assert json.loads((gen / layout.MARKER).read_text())["sha256"] == digest  # the controller shows it
    assert run.termination["sha256"] == digest


@pytest.mark.stand_in(AMAZON_S3)
def test_s3_prefix_is_copied_object_by_object(tmp_path: Path, s3: S3) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "s3", "--uri", f"s3://{BUCKET}/tree/", **s3.env())
    gen = assert_synced(run, 0, "s3")
    expected = {"train.py": "print('s3')\n", "pkg": "/", "pkg/model.py": "W = 2\n", "empty": "/"}
    assert tree(gen) == expected
    marker = json.loads((gen / layout.MARKER).read_text())
    assert (marker["files"], marker["bytes"]) == (len(expected), data_bytes(expected))
    assert (mode(gen / "train.py"), mode(gen / "empty")) == (0o644, 0o755)


@pytest.mark.stand_in(AMAZON_S3)
@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        (f"s3://{BUCKET}/releases/missing.tar.gz", "no such key"),
        ("s3://no-such-bucket-here/code.tar.gz", "no such bucket"),
        (f"s3://{BUCKET}/nothing-here/", "no objects under this prefix"),
        (f"s3://{BUCKET}/releases/v1.zip", "name an archive"),
    ],
)
def test_s3_missing_objects_are_s3_fetch_failed(tmp_path: Path, s3: S3, uri: str, fragment: str) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "s3", "--uri", uri, **s3.env())
    assert_failed(run, 0, "S3FetchFailed", uri, fragment)


@pytest.mark.stand_in(AMAZON_S3)
@pytest.mark.parametrize("who", ["unknown key", "wrong secret", "no policy"])
def test_s3_refused_credentials_are_s3_fetch_failed(tmp_path: Path, s3: S3, who: str) -> None:
    keys = {
        "unknown key": ("AKIAUNKNOWNKEY000000", "whatever"),
        "wrong secret": (s3.reader[0], "not-the-secret"),
        "no policy": s3.nobody,
    }[who]
    uri = f"s3://{BUCKET}/releases/v1.tar.gz"
    run = sync_fetch(tmp_path, 0, "--source", "s3", "--uri", uri, **s3.env(keys))
    message = assert_failed(run, 0, "S3FetchFailed", uri, "access denied")
    assert "not-the-secret" not in message + run.stdout + run.stderr


@pytest.mark.stand_in(AMAZON_S3)
def test_s3_unreachable_endpoint_is_s3_fetch_failed(tmp_path: Path, s3: S3) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    uri = f"s3://{BUCKET}/releases/v1.tar.gz"
    run = sync_fetch(tmp_path, 0, "--source", "s3", "--uri", uri, **s3.env(endpoint=endpoint))
    assert_failed(run, 0, "S3FetchFailed", uri, f"cannot reach {endpoint}")


@pytest.mark.stand_in(AMAZON_S3)
@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        (f"s3://{BUCKET}/releases/evil.tar.gz", "path traversal"),
        (f"s3://{BUCKET}/releases/empty.tar.gz", "empty archive"),
        (f"s3://{BUCKET}/hostile/", "path traversal"),
        (f"s3://{BUCKET}/clash/", "both a file and a directory"),
        (f"s3://{BUCKET}/reserved/", "reserved name"),
        (f"s3://{BUCKET}/absolute/", "absolute path"),
    ],
)
def test_s3_hostile_content_is_invalid_archive(tmp_path: Path, s3: S3, uri: str, fragment: str) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "s3", "--uri", uri, **s3.env())
    assert_failed(run, 0, "InvalidArchive", fragment)
    assert not (tmp_path / "outside.txt").exists() and not (run.workspace / "outside.txt").exists()


@pytest.mark.stand_in(AMAZON_S3)
def test_s3_limits_hold_for_archives_and_prefixes(tmp_path: Path, s3: S3) -> None:
    for uri in (f"s3://{BUCKET}/releases/v1.tar.gz", f"s3://{BUCKET}/tree/"):
        where = tmp_path / uri.rpartition("/")[2].replace(".", "-")
        run = sync_fetch(where, 0, "--source", "s3", "--uri", uri, "--max-bytes", "8", **s3.env())
        assert_failed(run, 0, "ArchiveTooLarge", "more than 8 bytes")


# -- pvc -------------------------------------------------------------------------------------------


@pytest.fixture
def claim(tmp_path: Path) -> Path:
    """A source claim with a project under `projects/nlp`."""
    root = tmp_path / "claim"
    project = root / "projects" / "nlp"
    (project / "data").mkdir(parents=True)
    (project / "train.py").write_text("print('pvc')\n")
    (project / "train.py").chmod(0o750)
    (project / "data" / "vocab.txt").write_text("a b c\n")
    (project / "data" / "vocab.txt").chmod(0o600)
    (project / "current").symlink_to("data/vocab.txt")
    (root / "elsewhere.txt").write_text("not part of the project\n")
    return root


def test_pvc_copies_the_sub_path(tmp_path: Path, claim: Path) -> None:
    run = sync_fetch(
        tmp_path, 0, "--source", "pvc", "--sub-path", "projects/nlp", TORCHRUN_SOURCE_DIR=str(claim)
    )
    gen = assert_synced(run, 0, "pvc")
    expected = {
        "current": "-> data/vocab.txt",
        "data": "/",
        "data/vocab.txt": "a b c\n",
        "train.py": "print('pvc')\n",
    }
    assert tree(gen) == expected
    # the upload's mode rule: readable by any worker uid, execute bits kept
    assert (mode(gen / "train.py"), mode(gen / "data/vocab.txt"), mode(gen / "data")) == (0o754, 0o644, 0o755)
    marker = json.loads((gen / layout.MARKER).read_text())
    assert (marker["files"], marker["bytes"]) == (len(expected), data_bytes(expected))
    # the claim is only read
    assert (claim / "projects/nlp/train.py").read_text() == "print('pvc')\n"


def test_pvc_without_sub_path_copies_the_whole_claim(tmp_path: Path, claim: Path) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "pvc", TORCHRUN_SOURCE_DIR=str(claim))
    gen = assert_synced(run, 0, "pvc")
    assert tree(gen)["elsewhere.txt"] == "not part of the project\n"
    assert tree(gen)["projects/nlp/train.py"] == "print('pvc')\n"


@pytest.mark.parametrize(
    ("sub_path", "fragment"), [("projects/cv", "does not exist"), ("../claim", "relative path inside")]
)
def test_pvc_missing_sub_path_is_source_not_found(
    tmp_path: Path, claim: Path, sub_path: str, fragment: str
) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "pvc", "--sub-path", sub_path, TORCHRUN_SOURCE_DIR=str(claim))
    assert_failed(run, 0, "SourceNotFound", fragment)


def test_pvc_without_its_claim_is_source_not_found(tmp_path: Path) -> None:
    run = sync_fetch(tmp_path, 0, "--source", "pvc", TORCHRUN_SOURCE_DIR=str(tmp_path / "not-mounted"))
    assert_failed(run, 0, "SourceNotFound", "no source claim at")


@pytest.mark.parametrize(
    "target",
    [
        "../../elsewhere.txt",  # climbs out by its text
        "/etc/passwd",  # absolute
        "inner/..",  # inside by its text, but inner -> . so really the claim's projects/
    ],
)
def test_pvc_symlink_leaving_the_tree_is_refused(tmp_path: Path, claim: Path, target: str) -> None:
    project = claim / "projects" / "nlp"
    if target.startswith("inner/"):
        (project / "inner").symlink_to(".")
    (project / "sneaky").symlink_to(target)
    run = sync_fetch(
        tmp_path, 0, "--source", "pvc", "--sub-path", "projects/nlp", TORCHRUN_SOURCE_DIR=str(claim)
    )
    assert_failed(run, 0, "InvalidArchive", "sneaky")


def test_pvc_copy_is_held_to_the_limits(tmp_path: Path, claim: Path) -> None:
    args = ("--source", "pvc", "--sub-path", "projects/nlp")
    run = sync_fetch(tmp_path, 0, *args, "--max-files", "2", TORCHRUN_SOURCE_DIR=str(claim))
    assert_failed(run, 0, "ArchiveTooLarge", "more than 2 entries")


def test_pvc_fifo_in_the_claim_is_refused(tmp_path: Path, claim: Path) -> None:
    os.mkfifo(claim / "projects" / "nlp" / "pipe")
    run = sync_fetch(
        tmp_path, 0, "--source", "pvc", "--sub-path", "projects/nlp", TORCHRUN_SOURCE_DIR=str(claim)
    )
    assert_failed(run, 0, "InvalidArchive", "pipe")


@pytest.mark.parametrize("swapped", ["train.py", "data"])
def test_pvc_entry_swapped_for_a_link_after_its_check_is_never_followed(
    tmp_path: Path, claim: Path, monkeypatch: pytest.MonkeyPatch, swapped: str
) -> None:
    """The race made deterministic: the copier has listed and judged `swapped` (a file, a
    directory) when another writer of the claim replaces it with a link to a secret outside the
    tree; the copy is refused and nothing of the secret lands in the workspace."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text("s3cr3t")
    project = claim / "projects" / "nlp"
    real_stat, done = os.stat, []

    def stat_then_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        st = real_stat(path, *args, **kwargs)
        if path == swapped and kwargs.get("dir_fd") is not None and not done:
            done.append(1)
            victim = project / swapped
            if victim.is_dir():
                (victim / "vocab.txt").unlink()
                victim.rmdir()
                victim.symlink_to(secret)
            else:
                victim.unlink()
                victim.symlink_to(secret / "token")
        return st

    monkeypatch.setattr(pvc_source.os, "stat", stat_then_swap)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(SyncError) as e:
        pvc_source.copy(dest, claim, "projects/nlp", Limits())
    assert e.value.reason == "InvalidArchive" and "replaced while it was copied" in e.value.message
    assert done and not any("s3cr3t" in p.read_text() for p in dest.rglob("*") if p.is_file())
