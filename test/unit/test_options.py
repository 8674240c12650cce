"""`--cluster-domain`: the DNS domain in the c10d rendezvous endpoint, checked at start-up."""

from __future__ import annotations

import pytest

from controller.cmd.options import parse


def test_the_cluster_domain_defaults_to_cluster_local_and_takes_another() -> None:
    assert parse([]).cluster_domain == "cluster.local"
    assert parse(["--cluster-domain", "k8s.corp.example"]).cluster_domain == "k8s.corp.example"


@pytest.mark.parametrize("bad", ["", "Cluster.Local", "cluster.local.", "-x.local", "a..b", "a_b.local"])
def test_a_cluster_domain_that_is_not_a_dns_name_exits_with_one_line(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse([f"--cluster-domain={bad}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--cluster-domain must be a DNS name" in err, err
