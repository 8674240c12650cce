#!/usr/bin/env bash
# Build scheduler-plugins (sigs.k8s.io/scheduler-plugins@$SCHEDULER_PLUGINS_VERSION) from the Go
# module proxy, once per pin, into $TORCHRUN_CACHE_DIR/bin/scheduler-plugins-<version>/:
#   scheduler   <- cmd/scheduler: kube-scheduler with the out-of-tree plugins (Coscheduling)
#   controller  <- cmd/controller: keeps the PodGroups' status (phase, scheduled, running, ...)
#   coscheduling-scheduler-config.yaml <- manifests/coscheduling/scheduler-config.yaml, the
#               module's own KubeSchedulerConfiguration for Coscheduling, which the tests run
# Optional: only the gang tests (test/integration/test_gang.py) run them, and they skip, saying
# so, when the binaries are not there.
#   hack/testbed/build-scheduler-plugins.sh    build if needed; prints the binaries' directory
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required" >&2; exit 1; }

MODULE=sigs.k8s.io/scheduler-plugins
OUT="$BIN_DIR/scheduler-plugins-$SCHEDULER_PLUGINS_VERSION"
if [ ! -f "$OUT/.done" ]; then
  log "building scheduler-plugins $SCHEDULER_PLUGINS_VERSION (several minutes on 2 cores)"
  start=$(date +%s)
  work="$CACHE_DIR/src/scheduler-plugins-$SCHEDULER_PLUGINS_VERSION"
  mkdir -p "$work" "$OUT"
  # a wrapper module with a pinned require (the proxy refuses version lists, so no `go install
  # pkg@version`); Go ignores a dependency's `replace` directives, and upstream pins every
  # k8s.io staging module (and k8s.io/kubernetes, which requires them at v0.0.0) by replace, so
  # the wrapper carries the upstream's requires (wrapper_gomod.py) and its replace directives.
  # Those pin Kubernetes 1.34.7 (v0.34.7 staging modules), but the proxy refuses
  # k8s.io/csi-translation-lib@v0.34.7 (403 "not available"); so the Kubernetes modules are the
  # test bed's own release instead (KUBE_VERSION, the control plane's), a patch release apart
  kube_staging="v0.${KUBE_VERSION#v1.}"
  read -r gomod src < <(go mod download -json "$MODULE@$SCHEDULER_PLUGINS_VERSION" \
    | python3 -c 'import json,sys; m = json.load(sys.stdin); print(m["GoMod"], m["Dir"])')
  {
    python3 "$HACK_DIR/testbed/wrapper_gomod.py" "$gomod" "$MODULE" "$SCHEDULER_PLUGINS_VERSION" \
      "$SCHEDULER_PLUGINS_VERSION" scheduler-plugins
    awk '/^replace \($/ {inside=1; print; next} inside {print; if ($0 == ")") inside=0; next}
         /^replace / {print}' "$gomod" \
      | sed -E "s#=> (k8s\.io/[^ ]+) $SCHEDULER_PLUGINS_VERSION\$#=> \\1 $kube_staging#; s#=> k8s\.io/kubernetes v1\.[0-9.]+\$#=> k8s.io/kubernetes $KUBE_VERSION#"
  } > "$work/go.mod"
  printf 'package main\n' > "$work/doc.go"  # a module needs one package of its own
  # stamped with the Kubernetes release it is built from, as kube-scheduler is: the version is
  # also its compatibility version (unstamped, v0.0.0-master; stamped with the plugins' v0.34.7,
  # as upstream's Makefile does, it refuses to start: "emulation version 0.34 is not between
  # [1.31, 0.34.0]")
  (cd "$work" && nice -n 19 go build -trimpath -o "$OUT/" -ldflags "$(kube_ldflags) -s -w" \
    "$MODULE/cmd/scheduler" "$MODULE/cmd/controller")
  install -m 0644 "$src/manifests/coscheduling/scheduler-config.yaml" "$OUT/coscheduling-scheduler-config.yaml"
  touch "$OUT/.done"
  log "scheduler-plugins built in $(( $(date +%s) - start ))s"
fi
echo "$OUT"
