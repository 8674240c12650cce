"""The progress endpoint's TLS: a certificate from `--progress-cert-dir`, else one made at start.

`server_context(cert_dir)` loads `tls.crt`/`tls.key` from the directory (e.g. a cert-manager
Certificate's Secret mounted there) and loads them again when they change (`CertReloader`): every
new connection's handshake looks at the two files' identity (inode, size, modification time:
two `stat` calls, no read) and, when either moved, the next handshakes are served the new pair —
the kubelet's atomic swap of a Secret volume and a plain overwrite alike. Connections already
open keep theirs; a pair that does not load (half written, a key that does not match) leaves the
last good one served, and is tried again once the files change again.
With no directory it makes a self-signed ECDSA P-256 certificate valid for a year, in a
short-lived child process (`python -m controller.progress.tls`, which hands the PEMs back over a
pipe), so `cryptography` (~14 MiB of RSS) is never loaded into the controller itself; the files
ssl needs live in a private temporary directory removed at once.
`ca_bundle(cert_dir)` is the `ca.crt` beside them, if any: the controller gives it to the
reporters, which then verify the endpoint against it (read once, at start: a new CA reaches the
pods created after a restart of the controller). A self-signed certificate has no CA to
hand out (each replica makes its own, and a job's pods outlive a failover), so reporters then
encrypt without verifying — docs/design/progress.md says what that costs and why it is bounded.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import structlog

log = structlog.get_logger("progress")
SUBJECT = "torchrun-controller progress endpoint"


def server_context(cert_dir: str | None) -> ssl.SSLContext:
    """A TLS server context with the directory's certificate, served anew whenever its files
    change (`CertReloader`), or a fresh self-signed one."""
    if cert_dir:
        return CertReloader(cert_dir).front
    cert, key = self_signed_in_child()
    with tempfile.TemporaryDirectory() as tmp:  # ssl loads chains from files only
        crt_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        crt_path.write_bytes(cert)
        return _context(str(crt_path), str(key_path))


def _context(crt: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(crt, key)
    return ctx


class CertReloader:
    """`tls.crt` and `tls.key` of a directory, as they are when each connection says hello.

    `front` is the context to serve with (it holds the pair as loaded at start, so a missing or
    bad pair fails the start, as before). Its hello callback runs in the handshake of every new
    connection, before the server's certificate is sent: when the files' identity moved, the pair
    is loaded into a new context (once, under the lock: other handshakes wait for that load only)
    and the connection is switched to the newest good context. Without a change that costs two
    `stat` calls; reads of the files happen only when they changed."""

    def __init__(self, cert_dir: str) -> None:
        self.crt, self.key = os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key")
        self._lock = threading.Lock()  # guards _seen and _current
        self._seen = self._identity()
        self.front = _context(self.crt, self.key)
        self.front.sni_callback = self._hello
        self._current = self.front

    def current(self) -> ssl.SSLContext:
        """The context of the pair on disk now; the last good one while it does not load."""
        seen = self._identity()
        with self._lock:
            if seen is None or seen == self._seen:
                return self._current
            self._seen = seen
            try:
                self._current = _context(self.crt, self.key)
                log.info("progress endpoint certificate reloaded", path=self.crt)
            except (OSError, ssl.SSLError) as exc:
                log.warning(
                    "progress endpoint certificate not reloaded: the last one is served", error=str(exc)
                )
            return self._current

    def _hello(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        current = self.current()
        if current is not ctx:
            conn.context = current

    def _identity(self) -> tuple[tuple[int, int, int, int], ...] | None:
        """Which files the two names point to now (a swapped symlink moves the inode); None
        while either is missing."""
        try:
            stats = (os.stat(self.crt), os.stat(self.key))
        except OSError:
            return None
        return tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)


def self_signed_in_child(timeout: float = 60.0) -> tuple[bytes, bytes]:
    """`self_signed()` made by a child process, so this one never imports `cryptography`."""
    proc = subprocess.run(
        [sys.executable, "-m", "controller.progress.tls"], capture_output=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip()
        raise ValueError(f"cannot make a self-signed certificate: {why}")
    pem = proc.stdout.decode()
    marker = "-----BEGIN PRIVATE KEY-----"
    cert, sep, key = pem.partition(marker)
    if not sep or "BEGIN CERTIFICATE" not in cert:
        raise ValueError("cannot make a self-signed certificate: the child wrote no certificate and key")
    return cert.encode(), (marker + key).encode()


def ca_bundle(cert_dir: str | None) -> str | None:
    """The PEM of `ca.crt` in `cert_dir`, when there is one."""
    if not cert_dir:
        return None
    path = Path(cert_dir, "ca.crt")
    return path.read_text() if path.is_file() else None


def self_signed(days: int = 365, subject: str = SUBJECT, ips: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
    """A self-signed certificate and its private key, both PEM. With `ips` it names those
    addresses (subjectAltName) and is its own CA, so a client can verify against it."""
    # imported here: `cryptography` costs ~14 MiB of RSS, and only a self-signed certificate needs it
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    if ips:
        sans = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), False)
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    cert = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


if __name__ == "__main__":  # `self_signed_in_child`'s child: the certificate, then the key, as PEM
    _cert, _key = self_signed()
    sys.stdout.buffer.write(_cert + _key)
