#!/usr/bin/env bash
# Run every check and test: ruff, mypy, import contracts, unit, integration and e2e tests.
# On a fresh machine it installs what it needs: a virtualenv with the project and its test extra,
# the control plane binaries built from the Go module proxy, the real node's kubelet and CoreDNS,
# and the images (all cached outside the repo); as root, Debian packages with apt.
#   hack/test.sh                 everything
#   hack/test.sh test/unit       just these pytest paths (extra args go to pytest)
set -euo pipefail
source "$(dirname "$0")/testbed/lib.sh"
cd "$REPO_DIR"

VENV="$("$HACK_DIR/venv.sh")"
export PATH="$VENV/bin:$PATH"

log "ruff"
ruff check controller test hack
ruff format --check controller test hack
log "mypy"
mypy
log "import contracts"
lint-imports .importlinter

"$HACK_DIR/build-controlplane.sh"
# the real Kueue controller, for the test that runs a job through it (cached like the rest)
"$HACK_DIR/testbed/build-kueue.sh" >/dev/null
# the gang schedulers of test_gang.py (cached): scheduler-plugins' scheduler (Coscheduling) and
# PodGroup controller, and Volcano's scheduler
"$HACK_DIR/testbed/build-scheduler-plugins.sh" >/dev/null
"$HACK_DIR/testbed/build-volcano.sh" >/dev/null
# etcd 3.5 (v2 API) and the torchruns the launch is checked against (test_torchrun_compat.py)
"$HACK_DIR/testbed/build-etcd-v2.sh" >/dev/null
"$HACK_DIR/testbed/torchrun-versions.sh" >/dev/null
# Debian's Prometheus and promtool (the alert rules' tests, the dashboard's queries run for real) and
# Grafana's published dashboard schema with TypeScript's compiler (test_dashboard_schema.py), from npm
"$HACK_DIR/testbed/build-prometheus.sh" >/dev/null
"$HACK_DIR/testbed/build-grafana-schema.sh" >/dev/null
# Helm, which lints, renders and installs charts/torchrun-controller (test_helm_chart.py, and on the
# real node test_realnode_progress_service.py)
"$HACK_DIR/testbed/build-helm.sh" >/dev/null
"$HACK_DIR/testbed/build-image.sh" >/dev/null || log "image not built: test/integration/test_image.py fails and says why"
# the real node: kubelet, CoreDNS, the pause image, and the images it runs (controller, torch)
"$HACK_DIR/testbed/build-realnode.sh" >/dev/null \
  && "$HACK_DIR/testbed/build-node-images.sh" >/dev/null \
  || log "real node not built: test/e2e/test_realnode.py fails and says why"

log "pytest"
# pytest-xdist workers, each with a control plane of its own: four by default, the real-node
# tests split over two real nodes beside each other (realnode-0 and realnode-1, a worker each,
# started first; test/conftest.py's groups) while the other two take the rest.
# TORCHRUN_TEST_WORKERS=N for another count (with fewer than three, or TORCHRUN_TEST_REAL_NODES=1,
# every real-node test runs on realnode-0, one after another, beside the rest);
# TORCHRUN_TEST_WORKERS=0 runs the tests in this process alone.
workers="${TORCHRUN_TEST_WORKERS:-4}"
nodes=1
[ "$workers" -ge 3 ] && nodes=2
export TORCHRUN_TEST_REAL_NODES="${TORCHRUN_TEST_REAL_NODES:-$nodes}"
parallel=()
# with two real nodes, groups start in the order of their first test, which test/conftest.py makes
# the real nodes' (else xdist starts the groups with the most tests first, whatever their length)
order=()
[ "$TORCHRUN_TEST_REAL_NODES" = 2 ] && order=(--no-loadscope-reorder)
[ "$workers" -gt 0 ] && parallel=(-n "$workers" --dist loadgroup "${order[@]}")
set +e
# -rs prints every skip's reason; a skip not in test/expected_skips.txt fails the run (test/conftest.py)
python -m pytest -p no:cacheprovider -rs "${parallel[@]}" "${@:-test}"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
