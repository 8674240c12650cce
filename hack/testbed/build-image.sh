#!/usr/bin/env bash
# Build the project's Dockerfile for real, without a container engine (SPEC §9, §10): Debian's
# buildah (chroot isolation, vfs storage: no daemon, no overlay mounts) on a base image made here,
# since no registry serves `python:3.11-slim`. The base is a Debian bookworm root filesystem from
# mmdebstrap with what the Dockerfile uses of python:3.11-slim: `python` and `pip` on PATH (pip
# with `--python`, 22.3+), the venv module, groupadd/useradd, CA certificates; it is imported as a
# local image and passed as PYTHON_IMAGE. Unlike python:3.11-slim it also trusts this machine's
# extra CAs (/usr/local/share/ca-certificates): the build stage's `pip wheel` reaches PyPI through
# this site's TLS-intercepting proxy. Python is Debian's 3.11.2, not python.org's 3.11.x.
#
# Cached like the other hack/ builds, outside the repository: the base once per recipe (suite,
# packages, CAs), the image once per key of its inputs (Dockerfile, .dockerignore, the context it
# allows, this script, the base). Installs buildah and mmdebstrap from Debian when they are missing.
#   hack/testbed/build-image.sh    build if needed; prints NAME=VALUE lines:
#     IMAGE (local name), ROOT and RUNROOT (buildah's --root and --runroot; the driver is vfs),
#     SIZE (uncompressed, as `docker images` shows it),
#     BASE_SECONDS / BUILD_SECONDS (what the cold steps took when they ran)
# On failure it exits non-zero with the reason on its last line of stderr, which
# test/integration/test_image.py quotes.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

IMAGE_DIR="$CACHE_DIR/image"
STORAGE=(--storage-driver vfs --root "$IMAGE_DIR/storage" --runroot "$IMAGE_DIR/run")
SUITE=bookworm
MIRROR="${TORCHRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES=passwd,python3,python3-venv,python3-pip,python-is-python3,ca-certificates
# the context the Dockerfile may see (.dockerignore is an allowlist of these)
CONTEXT=(setup.py setup.cfg README.md controller)
mkdir -p "$IMAGE_DIR"

fail() {
  log "image build failed: $*"
  exit 1
}

need_tools() {
  need_debian buildah:buildah mmdebstrap:mmdebstrap || fail "buildah and mmdebstrap (Debian packages) are needed"
}

extra_cas() { find /usr/local/share/ca-certificates -name '*.crt' -type f 2>/dev/null | sort; }

base_key() {
  { echo "$SUITE $MIRROR $PACKAGES"; sed -n '/^make_base()/,/^image_key()/p' "$0"; extra_cas | xargs -r cat; } \
    | sha256sum | cut -c1-12
}

make_base() {  # make_base TAR: the root filesystem of the base image
  local tar=$1 hooks=()
  local ca
  while read -r ca; do
    [ -n "$ca" ] && hooks+=(--customize-hook="copy-in $ca /usr/local/share/ca-certificates")
  done < <(extra_cas)
  mmdebstrap --variant=apt --include="$PACKAGES" \
    --aptopt='APT::Install-Recommends "false"' --aptopt='Acquire::Retries "3"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "${hooks[@]}" --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
    "$SUITE" "$tar" "$MIRROR" >&2
}

base_image() {  # prints the base image's name, importing it if needed
  local key name tar ctr start
  key=$(base_key)
  name="localhost/torchrun-python-base:$SUITE-$key"
  if ! buildah "${STORAGE[@]}" inspect --type image "$name" >/dev/null 2>&1; then
    log "making the base image $name (mmdebstrap $SUITE: $PACKAGES)"
    start=$(date +%s)
    tar="$IMAGE_DIR/base-$key.tar"
    make_base "$tar" || fail "mmdebstrap could not make the $SUITE root filesystem from $MIRROR"
    ctr=$(buildah "${STORAGE[@]}" from scratch)
    buildah "${STORAGE[@]}" add "$ctr" "$tar" / >/dev/null
    # what python:3.11-slim sets: the Dockerfile's `PATH=...:$PATH` builds on it
    buildah "${STORAGE[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env LANG=C.UTF-8 --cmd python3 "$ctr"
    buildah "${STORAGE[@]}" commit --quiet --rm "$ctr" "$name" >/dev/null
    rm -f "$tar"
    echo "$(( $(date +%s) - start ))" > "$IMAGE_DIR/base-$key.seconds"
    log "base image made in $(cat "$IMAGE_DIR/base-$key.seconds")s"
  fi
  echo "$name"
}

image_key() {  # image_key BASE
  {
    echo "$1"
    cat "$0" Dockerfile .dockerignore
    find "${CONTEXT[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.py[co]' -print0 | sort -z \
      | xargs -0 sha256sum
  } | sha256sum | cut -c1-12
}

size_of() {  # size_of IMAGE: uncompressed, as `docker images` shows it (e.g. "372 MB")
  buildah "${STORAGE[@]}" images --format '{{.Size}}' "$1"
}

main() {
  cd "$REPO_DIR"
  need_tools
  local base key image start build_log
  base=$(base_image)
  key=$(image_key "$base")
  image="localhost/torchrun-controller:$key"
  build_log="$IMAGE_DIR/build-$key.log"
  if ! buildah "${STORAGE[@]}" inspect --type image "$image" >/dev/null 2>&1; then
    log "building the Dockerfile with buildah into $image"
    start=$(date +%s)
    if ! buildah "${STORAGE[@]}" build --isolation chroot --build-arg "PYTHON_IMAGE=$base" \
      --tag "$image" --file Dockerfile . > "$build_log" 2>&1; then
      fail "buildah build failed (log: $build_log): $(grep -v '^\(Copying\|Writing\|Storing\|Getting\)' "$build_log" | tail -n 15)"
    fi
    echo "$(( $(date +%s) - start ))" > "$IMAGE_DIR/build-$key.seconds"
    log "image built in $(cat "$IMAGE_DIR/build-$key.seconds")s"
    # keep one image of ours: vfs stores every layer as a full copy
    buildah "${STORAGE[@]}" images --format '{{.Name}}:{{.Tag}}' \
      | grep -E '^localhost/torchrun-(controller|python-base):' \
      | grep -vxF -e "$image" -e "$base" | xargs -r buildah "${STORAGE[@]}" rmi >/dev/null 2>&1 || true
    buildah "${STORAGE[@]}" rmi --prune >/dev/null 2>&1 || true
  fi
  echo "IMAGE=$image"
  echo "ROOT=$IMAGE_DIR/storage"
  echo "RUNROOT=$IMAGE_DIR/run"
  echo "SIZE=$(size_of "$image")"
  echo "BASE_SECONDS=$(cat "$IMAGE_DIR/base-${base##*-}.seconds" 2>/dev/null || echo unknown)"
  echo "BUILD_SECONDS=$(cat "$IMAGE_DIR/build-$key.seconds" 2>/dev/null || echo unknown)"
}

main "$@"
