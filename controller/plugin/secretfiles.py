"""Files that look like credentials, which `submit` refuses to upload unless `--force`.

A workspace is copied to every node of a shared cluster and kept on a PVC, so a private key or a
cloud credential packed by accident leaks further than the laptop it came from. The check is by
name (SSH keys, `*.pem`, `.env` files, cloud credential files, kubeconfigs) and by content (a PEM
private-key header, a kubeconfig's `kind: Config`), reading only a file's first bytes. It is a
net for accidents, not a scanner: a secret inside ordinary source is not found. Templates that
hold no secret by convention (`.env.example`, `.env.sample`, `.env.template`) pass.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import PurePosixPath

HEAD_BYTES = 4096  # how much of each file the content check reads

_SSH_KEYS = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk")
_NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    ("*.pem", "a PEM key or certificate bundle"),
    ("*.key", "a private key file"),
    ("*.p12", "a PKCS#12 key store"),
    ("*.pfx", "a PKCS#12 key store"),
    ("*.kubeconfig", "a kubeconfig"),
    ("kubeconfig", "a kubeconfig"),
    (".netrc", "login credentials (.netrc)"),
    (".git-credentials", "git credentials"),
    (".pgpass", "database credentials (.pgpass)"),
    ("application_default_credentials.json", "Google Cloud credentials"),
)
_PATH_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".aws/credentials", "AWS credentials"),
    (".aws/config", "AWS configuration"),
    (".kube/config", "a kubeconfig"),
    (".docker/config.json", "registry credentials (Docker config)"),
    (".config/gcloud/credentials.db", "Google Cloud credentials"),
    (".azure/accessTokens.json", "Azure credentials"),
)
_ENV_TEMPLATES = (".env.example", ".env.sample", ".env.template")
_PRIVATE_KEY = re.compile(rb"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")
_KUBECONFIG = re.compile(rb"^kind:\s*Config\s*$", re.MULTILINE)
_KUBECONFIG_PARTS = (b"clusters:", b"users:")


def _by_name(rel_path: str) -> str | None:
    path = PurePosixPath(rel_path)
    name = path.name
    if name in _SSH_KEYS:
        return "an SSH private key"
    if name == ".env" or (name.startswith(".env.") and name not in _ENV_TEMPLATES):
        return "environment secrets (.env)"
    for pattern, what in _NAME_PATTERNS:
        if fnmatch.fnmatchcase(name, pattern):
            return what
    posix = "/" + path.as_posix()
    for suffix, what in _PATH_SUFFIXES:
        if posix.endswith("/" + suffix):
            return what
    return None


def _by_content(head: bytes) -> str | None:
    if _PRIVATE_KEY.search(head):
        return "contains a private key"
    if _KUBECONFIG.search(head) and all(part in head for part in _KUBECONFIG_PARTS):
        return "a kubeconfig (kind: Config)"
    return None


def secret_reason(rel_path: str, head: bytes) -> str | None:
    """Why the file at `rel_path` (POSIX, relative to the project) whose first bytes are `head`
    looks like a secret, or None when it does not."""
    return _by_name(rel_path) or _by_content(head)
