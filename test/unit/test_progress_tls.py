"""`--progress-cert-dir` replaced under a running endpoint is served: each new TLS connection gets
the pair on disk now — after the kubelet's atomic swap of a Secret volume, and after a plain
overwrite — and a pair that does not load (a certificate without its key yet) leaves the last
good one served. The endpoint is the real `ProgressEndpoint`; the certificates are self-signed,
each with its own subject, so the one served is known by its name."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from progress_endpoints import standby_endpoint

from controller.progress.endpoint import ProgressEndpoint
from controller.progress.tls import self_signed, server_context


def served(port: int) -> str:
    """The common name of the certificate a new TLS connection to `port` is served."""
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=5)
    return str(x509.load_pem_x509_certificate(pem.encode()).subject.rfc4514_string())


def pair(directory: Path, name: str) -> None:
    """A self-signed certificate for CN=`name` and its key, as `tls.crt`/`tls.key` in `directory`."""
    cert, key = self_signed(subject=name)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert)
    (directory / "tls.key").write_bytes(key)


@pytest.fixture
def secret_volume(tmp_path: Path) -> Path:
    """A directory laid out as the kubelet mounts a Secret: `tls.crt -> ..data/tls.crt`,
    `..data -> ..<timestamp>/`, so an update is one atomic rename of `..data`."""
    pair(tmp_path / "..2026_01_01_a", "first")
    os.symlink("..2026_01_01_a", tmp_path / "..data")
    for name in ("tls.crt", "tls.key"):
        os.symlink(f"..data/{name}", tmp_path / name)
    return tmp_path


@pytest.fixture
def endpoint(secret_volume: Path) -> Iterator[ProgressEndpoint]:
    server = standby_endpoint(server_context(str(secret_volume)))
    yield server
    server.shutdown()


def test_a_secret_volume_updated_by_the_kubelet_is_served_to_the_next_connection(
    secret_volume: Path, endpoint: ProgressEndpoint
) -> None:
    assert served(endpoint.port) == "CN=first"
    pair(secret_volume / "..2026_01_01_b", "second")
    os.symlink("..2026_01_01_b", secret_volume / "..data_tmp")
    os.replace(secret_volume / "..data_tmp", secret_volume / "..data")  # the kubelet's atomic swap
    assert served(endpoint.port) == "CN=second"
    assert served(endpoint.port) == "CN=second"


def test_files_overwritten_in_place_are_served_once_both_halves_are_written(tmp_path: Path) -> None:
    pair(tmp_path, "first")
    server = standby_endpoint(server_context(str(tmp_path)))
    try:
        assert served(server.port) == "CN=first"
        cert, key = self_signed(subject="second")
        (tmp_path / "tls.crt").write_bytes(cert)  # the key is still the old one: no pair
        assert served(server.port) == "CN=first"  # the last good one, not a broken handshake
        (tmp_path / "tls.key").write_bytes(key)
        assert served(server.port) == "CN=second"
    finally:
        server.shutdown()
