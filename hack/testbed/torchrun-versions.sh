#!/usr/bin/env bash
# The torchruns the launch is checked against (SPEC §3: accepted by every torchrun from 1.10 to
# current), for test/integration/test_torchrun_compat.py. Once; a warm run only checks.
#   torch 1.13.1  Debian bookworm's python3-torch (CPU only, no GPU libraries) and python3-etcd,
#                 installed with apt: the whole torchrun, run by /usr/bin/python3 (~150 MB of
#                 packages, about 35 s). Its parser knows only the underscore spellings.
#   torch $TORCH_PARSER_VERSION  the pure-Python parser of that release (torch/distributed/run.py,
#                 torch/distributed/argparse_util.py), taken from its macOS arm64 wheel — the
#                 smallest one (~140 MB, fetched with pip from PyPI; only those files are kept,
#                 in $TORCHRUN_CACHE_DIR/torch-parser-<version>/). Its compiled parts are never
#                 loaded: the test imports run.py with the unrelated torch modules stubbed.
# Prints NAME=VALUE lines: DEBIAN_PYTHON, DEBIAN_TORCH (package version), TORCH_PARSER_DIR.
#   hack/testbed/torchrun-versions.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DEBIAN_PYTHON=/usr/bin/python3
debian_installed() {
  [ "$(dpkg-query -W -f='${Status}\n' python3-torch python3-etcd 2>/dev/null | grep -c 'install ok installed')" = 2 ]
}
if ! debian_installed; then
  command -v apt-get >/dev/null || { echo "apt-get is needed to install Debian's python3-torch" >&2; exit 1; }
  log "installing Debian's python3-torch and python3-etcd (torchrun 1.13.1, CPU only)"
  start=$(date +%s)
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends python3-torch python3-etcd >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-torch python3-etcd >/dev/null; }
  log "python3-torch installed in $(( $(date +%s) - start ))s"
fi
DEBIAN_TORCH=$(dpkg-query -W -f='${Version}' python3-torch)

PARSER_DIR="$CACHE_DIR/torch-parser-$TORCH_PARSER_VERSION"
if [ ! -f "$PARSER_DIR/.done" ]; then
  log "fetching the torchrun parser of torch $TORCH_PARSER_VERSION (its macOS arm64 wheel)"
  start=$(date +%s)
  venv="$("$HACK_DIR/venv.sh")"
  tmp="$CACHE_DIR/torch-wheel-$TORCH_PARSER_VERSION.tmp"
  rm -rf "$tmp" "$PARSER_DIR" && mkdir -p "$tmp"
  # macOS wheels of current torch are tagged macosx_14_0; cp312 exists for every 2.x since 2.2
  "$venv/bin/pip" download -q "torch==$TORCH_PARSER_VERSION" --no-deps --only-binary=:all: \
    --platform macosx_14_0_arm64 --python-version 3.12 --implementation cp -d "$tmp" >&2
  "$venv/bin/python" - "$tmp" "$PARSER_DIR.tmp" <<'PY'
import hashlib, pathlib, shutil, sys, zipfile
tmp, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(wheel,) = tmp.glob("torch-*.whl")
shutil.rmtree(out, ignore_errors=True)
with zipfile.ZipFile(wheel) as z:
    for name in ("torch/distributed/run.py", "torch/distributed/argparse_util.py", "torch/version.py"):
        z.extract(name, out)
digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
(out / "SOURCE").write_text(f"{wheel.name} sha256:{digest}\n")
PY
  rm -rf "$tmp"
  mv "$PARSER_DIR.tmp" "$PARSER_DIR"
  touch "$PARSER_DIR/.done"
  log "torch $TORCH_PARSER_VERSION parser ready in $(( $(date +%s) - start ))s"
fi
echo "DEBIAN_PYTHON=$DEBIAN_PYTHON"
echo "DEBIAN_TORCH=$DEBIAN_TORCH"
echo "TORCH_PARSER_DIR=$PARSER_DIR"
