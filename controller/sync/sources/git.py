"""The `git` source: a shallow checkout of one ref, without its `.git`, as a generation.

Why the `git` binary and not a library: it speaks every transport (https, ssh, git://, file) and
every kind of auth our users' servers have, shallow fetches included, and it is what they debug
with; the controller image installs it (see the Dockerfile) so the sync pods have it. It must be
git 2.31 or newer (configuration through `GIT_CONFIG_COUNT`; Debian bookworm has 2.39).

What this module guarantees:
- Shallow: `git init`, `git fetch --depth 1 origin <ref>` (a branch, a tag, `HEAD` when no ref
  is given, or a commit where the server allows wanting it), checked out detached into the
  generation's temporary directory; a ref that looks like a commit id and cannot be fetched
  shallowly (an abbreviated id, or a server that refuses unadvertised objects) falls back to a
  full fetch of branches and tags, then resolves the id locally.
- Credentials never reach a URL or an argument list: basic-auth goes through a credential helper
  that git runs only when the server asks (401) and that reads the Secret's `username` and
  `password` files itself (nothing is written); an ssh key goes through `GIT_SSH_COMMAND`, as a
  private 0600 copy in a temporary directory (`$TMPDIR`, removed afterwards) because ssh refuses
  a group-readable key, which is what a Secret volume holds. `known_hosts` pins the host when present;
  otherwise the first key seen is accepted (`StrictHostKeyChecking=accept-new`).
- Nothing interactive and nothing from the machine: no terminal prompt, no system or global git
  config, no hooks, the `ext::` transport off, English messages; every git process (and its ssh
  or http helper) is killed when the deadline passes.
- Every failure is `GitFetchFailed` with one line: the URL without credentials and git's own last
  error ("couldn't find remote ref x", "Authentication failed ...", "unable to connect ...").
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from controller.sync.errors import GIT_FETCH_FAILED, SyncError
from controller.sync.generations import Marker, publish
from controller.sync.limits import Limits, Stats
from controller.sync.request import FetchRequest
from controller.sync.tree import check_tree

DEFAULT_TIMEOUT = 900.0  # the whole fetch and checkout
# a full or abbreviated commit id: worth a full fetch when the shallow one is refused
_COMMIT_ID = re.compile(r"[0-9a-fA-F]{7,64}")
_MESSAGE_LIMIT = 600
_GENERIC = "Could not read from remote repository"
_PREFIXES = ("fatal:", "error:")


def fetch(request: FetchRequest) -> Marker:
    """Publish `request.ref` of `request.url` as generation `request.generation`."""
    url = request.url
    if not url:
        raise SyncError(GIT_FETCH_FAILED, "the git source needs --url")
    commits: list[str] = []

    def fill(tmp: Path) -> Stats:
        done = checkout(tmp, url, request.ref, request.limits, secret_dir=request.secret_dir, env=request.env)
        commits.append(done.commit)
        return done.stats

    marker = publish(request.workspace, request.generation, fill, source="git")
    # the marker has no field for it; the sync pod's log keeps which commit this generation is
    print(f"Fetched {redact(url)} {request.ref or 'HEAD'} at commit {commits[0]}", flush=True)
    return marker


@dataclass(frozen=True)
class Checkout:
    commit: str
    stats: Stats


def checkout(
    dest: Path,
    url: str,
    ref: str | None,
    limits: Limits,
    *,
    secret_dir: Path,
    env: Mapping[str, str],
    timeout: float = DEFAULT_TIMEOUT,
) -> Checkout:
    """Check out `ref` of `url` into the empty directory `dest`: the tree only (no `.git`),
    checked by `check_tree` against `limits`."""
    shown = redact(url)
    _check_arguments(url, ref, shown)
    deadline = time.monotonic() + timeout
    with git_environment(secret_dir, env) as git_env:
        git = _Git(dest, git_env, deadline, shown, secret=_password_in(url))
        git.run("init", "--quiet", "--template=")
        git.run("remote", "add", "origin", url)
        target = "FETCH_HEAD"
        wanted = ref or "HEAD"
        try:
            git.run("fetch", "--quiet", "--depth", "1", "--no-tags", "origin", wanted)
        except SyncError:
            if not _COMMIT_ID.fullmatch(wanted):
                raise
            git.run("fetch", "--quiet", "--tags", "origin")
            target = git.run(
                "rev-parse", "--verify", "--quiet", f"{wanted}^{{commit}}", missing=f"no commit {wanted}"
            )
        git.run("checkout", "--quiet", "--detach", target)
        commit = git.run("rev-parse", "HEAD")
    shutil.rmtree(dest / ".git")
    return Checkout(commit, check_tree(dest, limits))


def redact(url: str) -> str:
    """`url` without its user-info part (`https://user:token@host/x` → `https://host/x`)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _password_in(url: str) -> str | None:
    return urlsplit(url).password or None


def _check_arguments(url: str, ref: str | None, shown: str) -> None:
    # git would read either as an option
    if not url or url.startswith("-") or any(c.isspace() for c in url):
        raise SyncError(GIT_FETCH_FAILED, f"not a repository URL: {shown!r}")
    if ref is not None and (not ref or ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref)):
        raise SyncError(GIT_FETCH_FAILED, f"{shown}: not a ref: {ref!r}")


class _Git:
    """Runs git in one repository with one environment, each command bounded by the deadline."""

    def __init__(
        self, repo: Path, env: Mapping[str, str], deadline: float, shown_url: str, secret: str | None
    ) -> None:
        self._repo, self._env, self._deadline = repo, env, deadline
        self._shown, self._secret = shown_url, secret

    def run(self, *args: str, missing: str | None = None) -> str:
        """Stdout of `git <args>`, stripped; a failure raises `GitFetchFailed` with git's last error,
        or `missing` when git says nothing (as `rev-parse --quiet` does)."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise self._timed_out()
        command = ["git", "-C", str(self._repo), "-c", "core.hooksPath=/dev/null", *args]
        with subprocess.Popen(
            command,
            env=dict(self._env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group: a timeout kills its helpers too
        ) as proc:
            try:
                out, err = proc.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise self._timed_out() from None
        if proc.returncode != 0:
            raise SyncError(
                GIT_FETCH_FAILED, self._message(last_error(err) or missing or f"git {args[0]} failed")
            )
        return out.strip()

    def _timed_out(self) -> SyncError:
        return SyncError(GIT_FETCH_FAILED, self._message("git did not finish in time"))

    def _message(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "***")
        return f"{self._shown}: {text}"[:_MESSAGE_LIMIT]


def last_error(stderr: str) -> str:
    """Git's last `fatal:`/`error:` line (and the lines that continue it) as one line, without
    the prefix; the last non-empty line when there is none. When that is the generic "Could not
    read from remote repository" (ssh, file://), what came before says why, so it leads: an
    earlier fatal/error line, or else ssh's own line just before."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith(_PREFIXES)]
    if not starts:
        return lines[-1] if lines else ""
    last = starts[-1]
    text = _unprefixed(" ".join(lines[last:]))
    if not text.startswith(_GENERIC):
        return text
    if len(starts) > 1:
        return f"{_unprefixed(lines[starts[-2]])} ({_GENERIC})"
    if last > 0:
        return f"{lines[last - 1]} ({_GENERIC})"
    return text


def _unprefixed(line: str) -> str:
    return line.partition(":")[2].strip()


@contextmanager
def git_environment(secret_dir: Path, base: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """The environment git runs in: isolated from the machine's config, never prompting, with
    the Secret's credentials wired in (a private key copy exists only inside this block)."""
    env = {k: v for k, v in base.items() if not k.startswith("GIT_") and k != "SSH_ASKPASS"}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    config = [("protocol.ext.allow", "never"), ("credential.helper", "")]  # "" drops inherited helpers
    username, password = secret_dir / "username", secret_dir / "password"
    if username.is_file() and password.is_file():
        config.append(("credential.helper", _credential_helper(username, password)))
    ssh = ["ssh", "-F", os.devnull, "-o", "BatchMode=yes", "-o", "ConnectTimeout=30"]  # no ssh_config either
    key = secret_dir / "ssh-privatekey"
    with ExitStack() as stack:
        if key.is_file():
            key_copy = stack.enter_context(_private_copy(key))
            ssh += ["-i", str(key_copy), "-o", "IdentitiesOnly=yes"]
            known_hosts = secret_dir / "known_hosts"
            if known_hosts.is_file():
                ssh += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"]
            else:
                ssh += ["-o", f"UserKnownHostsFile={key_copy.parent / 'known_hosts'}"]
                ssh += ["-o", "StrictHostKeyChecking=accept-new"]
        else:
            # no key: public ssh URLs still work, and ssh never tries to write $HOME/.ssh
            ssh += ["-o", f"UserKnownHostsFile={os.devnull}", "-o", "StrictHostKeyChecking=accept-new"]
        env["GIT_SSH_COMMAND"] = shlex.join(ssh)
        env["GIT_CONFIG_COUNT"] = str(len(config))
        for i, (key_name, value) in enumerate(config):
            env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key_name, value
        yield env


def _credential_helper(username: Path, password: Path) -> str:
    """A shell credential helper that answers `get` from the two files. The values travel only
    through git's credential pipe: `printf` is a shell builtin and `cat` sees only the paths."""
    u, p = shlex.quote(str(username)), shlex.quote(str(password))
    answer = f'printf \'username=%s\\npassword=%s\\n\' "$(cat {u})" "$(cat {p})"'
    return f'!f() {{ test "$1" = get || return 0; {answer}; }}; f'


@contextmanager
def _private_copy(key: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="torchrun-git-") as scratch:
        copy = Path(scratch) / "id"
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            data = key.read_bytes()
            # a key pasted without its final newline is "invalid format" to ssh
            out.write(data if data.endswith(b"\n") else data + b"\n")
        yield copy
