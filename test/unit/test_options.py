"""The `torchrun-controller` command line: every flag error is one line naming the flag (exit 2,
no usage; the usage is for --help), and a start-up that fails after parsing exits 1 with one line.
`--cluster-domain` is the DNS domain in the c10d rendezvous endpoint, checked at start-up."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cmd.options import parse, parser

# every flag with a value rule: (flag, a value it refuses, what the one line says)
REFUSED = [
    ("--threadiness", "0", "must be a positive integer, got '0'"),
    ("--threadiness", "two", "must be a positive integer, got 'two'"),
    ("--restart-limit", "-1", "must be an integer >= 0, got '-1'"),
    ("--resync-period", "-5", "must be a number of seconds >= 0 (0: off), got '-5'"),
    ("--resync-period", "nan", "must be a number of seconds >= 0 (0: off), got 'nan'"),
    ("--gc-interval", "0", "must be a positive number of seconds, got '0'"),
    ("--max-load-desired", "1.5", "must be a number in (0, 1], got '1.5'"),
    ("--max-load-desired", "0", "must be a number in (0, 1], got '0'"),
    ("--autoscaler-period", "-1", "must be a positive number of seconds, got '-1'"),
    ("--metrics-addr", "8080", "must be HOST:PORT"),
    ("--metrics-addr", "0.0.0.0:http", "must be HOST:PORT"),
    ("--health-addr", "0.0.0.0:70000", "must be HOST:PORT"),
    ("--leader-elect-lease-duration", "0", "must be a positive number of seconds, got '0'"),
    ("--leader-elect-renew-deadline", "inf", "must be a positive number of seconds, got 'inf'"),
    ("--leader-elect-retry-period", "-2", "must be a positive number of seconds, got '-2'"),
    ("--kube-api-qps", "0", "must be a positive number, got '0'"),
    ("--kube-api-burst", "1.5", "must be a positive integer, got '1.5'"),
    ("--upload-timeout", "0", "must be a positive number of seconds, got '0'"),
    ("--claim-bind-timeout", "soon", "must be a positive number of seconds, got 'soon'"),
    ("--cluster-domain", "Cluster.Local", "must be a DNS name such as cluster.local, got 'Cluster.Local'"),
    ("--progress-bind-address", "9443", "must be HOST:PORT, or empty (off), got '9443'"),
    ("--progress-url", "http://x:9443/v1/progress", "must be an https:// URL, or empty (off)"),
    ("--progress-period", "0", "must be a positive number of seconds, got '0'"),
    ("--log-level", "loud", "invalid choice: 'loud'"),
    ("--log-format", "xml", "invalid choice: 'xml'"),
]


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line `parse(argv)` exits 2 with."""
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and "usage" not in captured.err, captured.err
    assert captured.err.startswith("torchrun-controller: error: "), captured.err
    return captured.err.strip()


@pytest.mark.parametrize(("flag", "value", "says"), REFUSED, ids=[f"{f}={v}" for f, v, _ in REFUSED])
def test_a_bad_value_is_one_line_naming_the_flag_and_its_rule(
    flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused([flag, value], capsys)
    assert f"argument {flag}: {says}" in line, line


def test_every_flag_with_a_value_rule_is_in_the_table() -> None:
    """A flag added with a `type` or `choices` and no refused value above fails here."""
    ruled = {
        action.option_strings[0]
        for action in parser()._actions
        if action.option_strings and (action.type is not None or action.choices is not None)
    }
    assert ruled == {flag for flag, _, _ in REFUSED}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--threadines", "4"], "unrecognized arguments: --threadines 4"),
        (["--thread", "4"], "unrecognized arguments: --thread 4"),  # a prefix is not the flag
        (["--threadiness"], "argument --threadiness: expected one argument"),
        (["--namespace", "a", "extra"], "unrecognized arguments: extra"),
        (
            ["--leader-elect-lease-duration", "10", "--leader-elect-renew-deadline", "10"],
            "need --leader-elect-lease-duration > --leader-elect-renew-deadline > 1.2 * "
            "--leader-elect-retry-period (got 10, 10, 2)",
        ),
    ],
)
def test_an_unknown_mistyped_or_incomplete_flag_is_one_line_naming_it(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refused(argv, capsys).endswith(says)


def test_help_prints_the_usage_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: torchrun-controller") and "--threadiness" in out


def test_good_values_are_read() -> None:
    opts = parse(
        [
            *("--threadiness", "8", "--restart-limit", "0", "--resync-period", "0"),
            *("--max-load-desired", "1", "--kube-api-qps", "2.5"),
            *("--metrics-addr", ":9090", "--health-addr", "127.0.0.1:0"),
        ]
    )
    assert (opts.threadiness, opts.restart_limit, opts.resync_period, opts.max_load_desired) == (8, 0, 0, 1)
    assert (opts.metrics_addr, opts.health_addr, opts.kube_api_qps) == (":9090", "127.0.0.1:0", 2.5)


def test_the_cluster_domain_defaults_to_cluster_local_and_takes_another() -> None:
    assert parse([]).cluster_domain == "cluster.local"
    assert parse(["--cluster-domain", "k8s.corp.example"]).cluster_domain == "k8s.corp.example"


@pytest.mark.parametrize("bad", ["", "Cluster.Local", "cluster.local.", "-x.local", "a..b", "a_b.local"])
def test_a_cluster_domain_that_is_not_a_dns_name_exits_with_one_line(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "argument --cluster-domain: must be a DNS name" in refused([f"--cluster-domain={bad}"], capsys)


def run_controller(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cmd.main", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KUBERNETES_SERVICE_HOST": ""},
    )


def test_a_kubeconfig_that_cannot_be_loaded_fails_the_start_up_with_exit_1_and_one_line(
    tmp_path: Path,
) -> None:
    for kubeconfig in (tmp_path / "missing", tmp_path / "garbage"):
        if kubeconfig.name == "garbage":
            kubeconfig.write_text("clusters: [nonsense\n")
        done = run_controller("--kubeconfig", str(kubeconfig))
        assert done.returncode == 1, done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("torchrun-controller: "), done.stderr


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_an_address_already_taken_fails_the_start_up_with_exit_1_and_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = run_controller("--kubeconfig", str(kubeconfig), "--metrics-addr", address)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"torchrun-controller: cannot serve on {address}: {done.stderr.split(': ', 2)[2].strip()}"
    ]
    assert "Address already in use" in done.stderr
