"""The kubeconfig / in-cluster loader, credentials and TLS, with real files in tmp_path."""

from __future__ import annotations

import base64
import json
import os
import ssl
import stat
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.clock import FakeClock
from controller.progress.tls import self_signed
from controller.rest.client import RESTClient
from controller.rest.config import ClusterConfig, ConfigError
from controller.rest.credentials import TOKEN_FILE_PERIOD, Credentials
from controller.rest.errors import ApiError
from controller.rest.loading import current_namespace, load_config
from controller.rest.resources import NAMESPACES


def kubeconfig(
    path: Path,
    *,
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    name: str = "one",
    current: str | None = "one",
    namespace: str | None = None,
) -> Path:
    context: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster or {"server": f"https://{name}.invalid:6443"}}],
        "users": [{"name": name, "user": user or {}}],
        "contexts": [{"name": name, "context": context}],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class TestKubeconfigFiles:
    def test_certificates_as_files_are_relative_to_the_kubeconfig(self, tmp_path: Path) -> None:
        (tmp_path / "pki").mkdir()
        path = kubeconfig(
            tmp_path / "config",
            cluster={"server": "https://api:6443/", "certificate-authority": "pki/ca.crt"},
            user={"client-certificate": "pki/me.crt", "client-key": "/abs/me.key"},
        )
        cfg = load_config(str(path))
        assert cfg.host == "https://api:6443"
        assert cfg.ca_file == str(tmp_path / "pki" / "ca.crt")
        assert (cfg.cert_file, cfg.key_file) == (str(tmp_path / "pki" / "me.crt"), "/abs/me.key")

    def test_certificates_as_data_are_decoded(self, tmp_path: Path) -> None:
        path = kubeconfig(
            tmp_path / "config",
            cluster={"server": "api:6443", "certificate-authority-data": b64(b"CA PEM")},
            user={"client-certificate-data": b64(b"CERT PEM"), "client-key-data": b64(b"KEY PEM")},
        )
        cfg = load_config(str(path))
        assert cfg.host == "https://api:6443"  # no scheme: https, as client-go
        assert (cfg.ca_data, cfg.cert_data, cfg.key_data) == (b"CA PEM", b"CERT PEM", b"KEY PEM")
        assert "KEY PEM" not in repr(cfg)

    def test_kubeconfig_list_merged_first_name_and_first_current_context_win(self, tmp_path: Path) -> None:
        first = kubeconfig(tmp_path / "a", name="one", current=None)
        second = kubeconfig(tmp_path / "b", name="two", current="two")
        third = kubeconfig(tmp_path / "c", name="one", current="one", cluster={"server": "https://later:1"})
        listed = os.pathsep.join([str(first), str(tmp_path / "missing"), str(second), str(third)])
        env = {"KUBECONFIG": listed}
        assert load_config(environ=env).host == "https://two.invalid:6443"  # b's current-context
        assert load_config(context="one", environ=env).host == "https://one.invalid:6443"  # a's "one"

    def test_no_kubeconfig_at_all_is_one_line(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r"no kubeconfig: KUBECONFIG=.* has no file"):
            load_config(environ={"KUBECONFIG": str(tmp_path / "nope")})

    def test_token_and_basic_auth(self, tmp_path: Path) -> None:
        token = kubeconfig(tmp_path / "t", user={"token": "abc"})
        basic = kubeconfig(tmp_path / "b", user={"username": "u", "password": "p"})
        assert Credentials(load_config(str(token))).headers() == {"Authorization": "Bearer abc"}
        assert Credentials(load_config(str(basic))).headers() == {"Authorization": f"Basic {b64(b'u:p')}"}

    def test_namespace_of_the_current_context(self, tmp_path: Path) -> None:
        path = kubeconfig(tmp_path / "config", namespace="team")
        assert current_namespace(str(path)) == "team"
        assert current_namespace(str(kubeconfig(tmp_path / "other"))) == "default"


BAD = [
    ({"cluster": {"certificate-authority": "ca"}}, r"cluster 'one': server is not set"),
    ({"user": {"client-key-data": "not base64!"}}, r"user 'one': client-key-data is not valid base64"),
    ({"user": {"client-certificate-data": b64(b"x")}}, r"user 'one': client-key is missing"),
    (
        {"user": {"auth-provider": {"name": "gcp", "config": {}}}},
        r"user 'one': auth-provider \(gcp\) is not supported.*exec credential plugin",
    ),
    ({"user": {"exec": {"command": "x"}}}, r"user 'one': exec: apiVersion must be one of"),
    ({"user": {"tokenFile": "gone"}}, r"user 'one': tokenFile cannot be read"),
    ({"user": {"as": "admin"}}, r"user 'one': as \(impersonation\) is not supported"),
    (
        {"cluster": {"server": "https://a", "proxy-url": "socks5://p:1080"}},
        r"cluster 'one': proxy-url must be an http",
    ),
    ({"current": "elsewhere"}, r"context 'elsewhere' not found"),
]


@pytest.mark.parametrize(("fields", "message"), BAD)
def test_a_bad_kubeconfig_is_one_line_naming_the_field(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    path = kubeconfig(tmp_path / "config", **fields)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(str(path))
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_invalid_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("clusters:\n- name: a\n  cluster: {server: [\n")
    with pytest.raises(ConfigError, match=rf"kubeconfig {path}: not valid YAML at line \d"):
        load_config(str(path))


class TestTokenFile:
    def test_a_rotated_token_is_read_again_after_a_minute(self, tmp_path: Path) -> None:
        token = tmp_path / "token"
        token.write_text("first\n")
        clock = FakeClock()
        creds = Credentials(
            load_config(str(kubeconfig(tmp_path / "c", user={"tokenFile": "token"}))), clock=clock
        )
        assert creds.headers() == {"Authorization": "Bearer first"}
        token.write_text("second\n")
        clock.step(TOKEN_FILE_PERIOD - 1)
        assert creds.headers() == {"Authorization": "Bearer first"}  # at most once a minute
        clock.step(1)
        assert creds.headers() == {"Authorization": "Bearer second"}
        token.unlink()  # mid-rotation: the last token stays
        clock.step(TOKEN_FILE_PERIOD)
        assert creds.headers() == {"Authorization": "Bearer second"}


class TestInCluster:
    def service_account(self, tmp_path: Path, token: str = "sa-token") -> Path:
        (tmp_path / "token").write_text(token)
        (tmp_path / "ca.crt").write_text("CA")
        (tmp_path / "namespace").write_text("ops\n")
        return tmp_path

    def test_env_and_service_account_files(self, tmp_path: Path) -> None:
        sa = self.service_account(tmp_path)
        env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
        cfg = load_config(environ=env, service_account_dir=sa)
        assert cfg == ClusterConfig(
            host="https://10.0.0.1:443", ca_file=str(sa / "ca.crt"), token_file=str(sa / "token")
        )
        assert Credentials(cfg).headers() == {"Authorization": "Bearer sa-token"}
        assert (
            current_namespace(environ={"KUBECONFIG": str(tmp_path / "none")}, service_account_dir=sa) == "ops"
        )

    def test_ipv6_host_is_bracketed(self, tmp_path: Path) -> None:
        env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
        assert (
            load_config(environ=env, service_account_dir=self.service_account(tmp_path)).host
            == "https://[fd00::1]:443"
        )

    def test_an_explicit_kubeconfig_wins(self, tmp_path: Path) -> None:
        env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
        path = kubeconfig(tmp_path / "config")
        assert (
            load_config(str(path), environ=env, service_account_dir=tmp_path).host
            == "https://one.invalid:6443"
        )

    def test_no_token_is_one_line(self, tmp_path: Path) -> None:
        env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
        with pytest.raises(ConfigError, match="cannot read the service account token"):
            load_config(environ=env, service_account_dir=tmp_path)


PLUGIN = """
import json, os, sys
runs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
n = len(open(runs).read()) + 1 if os.path.exists(runs) else 1
open(runs, "w").write("x" * n)
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
status = {"token": f"{os.environ['PREFIX']}-{n}-{sys.argv[1]}-{info['spec']['interactive']}"}
if os.environ.get("EXPIRES"):
    status["expirationTimestamp"] = os.environ["EXPIRES"]
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""


class TestExecPlugin:
    def config(
        self, tmp_path: Path, api_version: str = "client.authentication.k8s.io/v1", **env: str
    ) -> ClusterConfig:
        (tmp_path / "plugin.py").write_text(PLUGIN)
        spec = {
            "apiVersion": api_version,
            "command": sys.executable,
            "args": [str(tmp_path / "plugin.py"), "arg"],
            "env": [{"name": "PREFIX", "value": "tok"}, *({"name": k, "value": v} for k, v in env.items())],
        }
        return load_config(str(kubeconfig(tmp_path / "config", user={"exec": spec})))

    def test_token_cached_until_expiry_then_run_again(self, tmp_path: Path) -> None:
        clock = FakeClock(wall_start=1_700_000_000.0)  # 2023-11-14T22:13:20Z
        cfg = self.config(tmp_path, EXPIRES="2023-11-14T22:18:20Z")  # five minutes later
        creds = Credentials(cfg, clock=clock)
        assert creds.headers() == {"Authorization": "Bearer tok-1-arg-False"}
        clock.step(299)
        assert creds.headers() == {"Authorization": "Bearer tok-1-arg-False"}
        clock.step(1)
        assert creds.headers() == {"Authorization": "Bearer tok-2-arg-False"}

    def test_v1beta1_and_a_401_runs_it_again(self, tmp_path: Path) -> None:
        creds = Credentials(self.config(tmp_path, "client.authentication.k8s.io/v1beta1"))
        assert creds.headers() == {"Authorization": "Bearer tok-1-arg-False"}
        assert creds.headers() == {"Authorization": "Bearer tok-1-arg-False"}  # no expiry: cached
        creds.unauthorized()
        assert creds.headers() == {"Authorization": "Bearer tok-2-arg-False"}

    def test_a_relative_command_is_relative_to_the_kubeconfig(self, tmp_path: Path) -> None:
        script = tmp_path / "bin" / "auth"
        script.parent.mkdir()
        cred = {
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": {"token": "t"},
        }
        script.write_text(f"#!/bin/sh\necho '{json.dumps(cred)}'\n")
        script.chmod(stat.S_IRWXU)
        spec = {"apiVersion": "client.authentication.k8s.io/v1", "command": "./bin/auth"}
        cfg = load_config(str(kubeconfig(tmp_path / "config", user={"exec": spec})))
        assert Credentials(cfg).headers() == {"Authorization": "Bearer t"}

    @pytest.mark.parametrize(
        ("command", "message"),
        [
            ("/nonexistent/aws-iam-authenticator", "exec plugin .*aws-iam-authenticator: not found"),
            ("false", "exec plugin false: exited 1"),
            ("true", r"exec plugin true: its output is not an ExecCredential \(not JSON\)"),
        ],
    )
    def test_a_failing_plugin_is_one_line(self, tmp_path: Path, command: str, message: str) -> None:
        spec = {"apiVersion": "client.authentication.k8s.io/v1", "command": command}
        cfg = load_config(str(kubeconfig(tmp_path / "config", user={"exec": spec})))
        with pytest.raises(ConfigError, match=message):
            Credentials(cfg).headers()


class TestTLS:
    """A real HTTPS server that requires a client certificate: CA and client certificate as data."""

    @pytest.fixture
    def server(self, tmp_path: Path) -> Iterator[tuple[str, bytes, tuple[bytes, bytes]]]:
        server_cert, server_key = self_signed(subject="api", ips=("127.0.0.1",))
        client_cert, client_key = self_signed(subject="me", ips=("127.0.0.2",))  # its own CA
        (tmp_path / "s.pem").write_bytes(server_cert + server_key)
        (tmp_path / "client-ca.pem").write_bytes(client_cert)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tmp_path / "s.pem")
        ctx.load_verify_locations(tmp_path / "client-ca.pem")
        ctx.verify_mode = ssl.CERT_REQUIRED

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps({"items": [], "auth": self.headers.get("Authorization")}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        httpd = HTTPServer(("127.0.0.1", 0), Handler)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        yield f"https://127.0.0.1:{httpd.server_address[1]}", server_cert, (client_cert, client_key)
        httpd.shutdown()

    def test_ca_and_client_certificate_as_data(self, server: tuple[str, bytes, tuple[bytes, bytes]]) -> None:
        host, ca, (cert, key) = server
        cfg = ClusterConfig(host=host, ca_data=ca, cert_data=cert, key_data=key, token="t")
        assert RESTClient(cfg, max_attempts=1).list(NAMESPACES) == {"items": [], "auth": "Bearer t"}

    @pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
    def test_an_unknown_server_certificate_is_refused(
        self, server: tuple[str, bytes, tuple[bytes, bytes]]
    ) -> None:
        host, _, (cert, key) = server
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            RESTClient(ClusterConfig(host=host, cert_data=cert, key_data=key), max_attempts=1).list(
                NAMESPACES
            )
        insecure = ClusterConfig(host=host, cert_data=cert, key_data=key, insecure_skip_tls_verify=True)
        assert RESTClient(insecure, max_attempts=1).list(NAMESPACES)["items"] == []

    def test_bad_tls_material_fails_at_construction(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="client certificate and key"):
            RESTClient(ClusterConfig(host="https://a", cert_data=b"junk", key_data=b"junk"))
        with pytest.raises(ConfigError, match="certificate authority"):
            RESTClient(ClusterConfig(host="https://a", ca_file=str(tmp_path / "missing.crt")))


def test_a_401_makes_the_exec_plugin_run_again(tmp_path: Path) -> None:
    statuses = [401, 200]
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(statuses.pop(0))
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        (tmp_path / "plugin.py").write_text(PLUGIN)
        spec = {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(tmp_path / "plugin.py"), "a"],
            "env": [{"name": "PREFIX", "value": "tok"}],
        }
        cluster = {"server": f"http://127.0.0.1:{httpd.server_address[1]}"}
        client = RESTClient(
            load_config(str(kubeconfig(tmp_path / "c", cluster=cluster, user={"exec": spec})))
        )
        with pytest.raises(ApiError) as err:
            client.list(NAMESPACES)
        assert err.value.status == 401  # raised, not retried
        client.list(NAMESPACES)
        assert seen == ["Bearer tok-1-a-False", "Bearer tok-2-a-False"]
    finally:
        httpd.shutdown()
