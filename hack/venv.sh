#!/usr/bin/env bash
# Create (once per checkout and setup.cfg version) the project's virtualenv outside the repo and
# print its path.
set -euo pipefail
source "$(dirname "$0")/testbed/lib.sh"
# Keyed by the declared dependencies only, so tool settings in setup.cfg do not rebuild it, and by
# the checkout: the editable install (and its `torchrun-controller` command) points at one
# checkout, so two clones never re-point each other's.
key=$( { python3 - "$REPO_DIR/setup.cfg" <<'PY'
import configparser, sys
cfg = configparser.ConfigParser()
cfg.read(sys.argv[1])
print(sys.version_info[:2], cfg.get("options", "install_requires"), dict(cfg["options.extras_require"]))
PY
echo "$REPO_DIR"; } | sha256sum | cut -c1-12)
venv="$CACHE_DIR/venv-$key"

# The virtualenvs of checkouts that are gone (a removed clone or worktree: 0.6 GB each), each
# known by the checkout its editable install points at; one being built (its lock held) is left.
prune_orphans() {
  local other url dir
  for other in "$CACHE_DIR"/venv-*/; do
    other=${other%/}
    [ "$other" != "$venv" ] || continue
    url=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["url"])' \
      "$other"/lib/python3*/site-packages/torchrun_controller-*.dist-info/direct_url.json 2>/dev/null) || continue
    dir=${url#file://}
    [ -n "$dir" ] && [ ! -e "$dir/setup.cfg" ] || continue
    if (flock -n 9 && rm -rf "$other") 9>"$other.lock"; then
      rm -f "$other.lock"
      log "removed $other: its checkout $dir is gone"
    fi
  done
}
if [ ! -f "$venv/.done" ]; then
  mkdir -p "$CACHE_DIR"
  exec 9>"$venv.lock"
  flock 9  # two runs from one checkout at once: one builds, the other waits for it
  if [ ! -f "$venv/.done" ]; then
    log "creating virtualenv $venv for $REPO_DIR"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip >&2
    "$venv/bin/pip" install -q -e "$REPO_DIR[test]" >&2
    touch "$venv/.done"
    prune_orphans
  fi
  exec 9>&-
fi
echo "$venv"
