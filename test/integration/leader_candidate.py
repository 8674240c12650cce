"""A leader-election candidate process for the integration test: prints LEADING/STOPPED lines."""

from __future__ import annotations

import sys
import threading

from controller.leaderelection import LeaderElectionConfig, LeaderElector
from controller.rest import RESTClient, load_config


def main() -> None:
    kubeconfig, namespace, identity = sys.argv[1:4]
    stop = threading.Event()
    config = LeaderElectionConfig(
        lease_name="candidates",
        namespace=namespace,
        identity=identity,
        lease_duration=4.0,
        renew_deadline=3.0,
        retry_period=0.5,
        on_started_leading=lambda: print(f"LEADING {identity}", flush=True),
        on_stopped_leading=lambda: print(f"STOPPED {identity}", flush=True),
    )
    LeaderElector(RESTClient(load_config(kubeconfig)), config).run(stop)


if __name__ == "__main__":
    main()
