#!/usr/bin/env bash
# Create (once per setup.cfg version) the project's virtualenv outside the repo and print its path.
set -euo pipefail
source "$(dirname "$0")/testbed/lib.sh"
# keyed by the declared dependencies only, so tool settings in setup.cfg do not rebuild it
key=$(python3 - "$REPO_DIR/setup.cfg" <<'PY' | sha256sum | cut -c1-12
import configparser, sys
cfg = configparser.ConfigParser()
cfg.read(sys.argv[1])
print(sys.version_info[:2], cfg.get("options", "install_requires"), dict(cfg["options.extras_require"]))
PY
)
venv="$CACHE_DIR/venv-$key"
if [ ! -f "$venv/.done" ]; then
  log "creating virtualenv $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q -e "$REPO_DIR[test]" >&2
  touch "$venv/.done"
elif [ "$(cd / && "$venv/bin/python" -c 'import controller, os; print(os.path.dirname(os.path.dirname(controller.__file__)))' 2>/dev/null)" != "$REPO_DIR" ]; then
  # the editable install points at whichever checkout ran last; make it this one
  "$venv/bin/pip" install -q --no-deps -e "$REPO_DIR" >/dev/null 2>&1 \
    || "$venv/bin/pip" install --no-deps -e "$REPO_DIR" >&2
fi
echo "$venv"
