#!/usr/bin/env bash
# The two images the real node (containerd + kubelet) runs, as docker archives that
# `ctr images import` takes, so the node needs no registry:
#   controller  the project's Dockerfile, built by hack/testbed/build-image.sh (sync pods and the
#               workers' code-copying init container run it), exported from buildah's storage;
#   train       the workers' image localhost/torchrun-train:<key>: a Debian trixie root filesystem
#               from mmdebstrap with python3 3.13 (`python` too), Debian's python3-torch 2.6.0 (CPU,
#               gloo; it ships /usr/bin/torchrun, so no wrapper; patched to make its TCPStores without
#               libuv and to load onto `cpu:0`, see TORCH_PATCH) and python3-etcd (torchrun's etcd
#               rendezvous backends), plus transformers and lightning from PyPI
#               (hack/testbed/train-requirements.txt: exact versions, wheels only, no dependencies
#               resolved here, so no PyPI torch and its GPU libraries) and compiled to bytecode by
#               the image's own python (the workers run as a user who cannot write __pycache__:
#               without it each of their processes compiled what it imported of those packages
#               again), committed with buildah and exported the same way. Debian's own /usr/lib/python3.13/sitecustomize.py stays: the
#               image has a sitecustomize of its own, as real images do.
# Inside containerd each image has exactly its buildah name, `localhost/<name>:<tag>`: a docker
# archive records it in manifest.json's RepoTags and ctr imports it as written ("localhost" is a
# registry host, so nothing is prefixed with docker.io/library/) — the name a pod spec uses, with
# imagePullPolicy IfNotPresent or Never (there is no registry at localhost to pull from).
#
# Cached outside the repository like the other hack/ builds, in $CACHE_DIR/node-images/: one archive
# per image name, and the controller's tag is already the key of its inputs (build-image.sh), the
# train image's the key of its recipe (suite, mirror, packages, the functions that make it). A warm
# run only checks that the archives exist. Installs buildah and mmdebstrap from Debian when they
# are missing (as root); the PyPI wheels are fetched by this machine's pip (its index and
# certificates), never from inside the image. Two runs at once: one builds, the other waits for it.
#   hack/testbed/build-node-images.sh   build if needed; prints NAME=VALUE lines:
#     CONTROLLER_IMAGE, CONTROLLER_ARCHIVE, TRAIN_IMAGE, TRAIN_ARCHIVE (the names and the files),
#     CONTROLLER_EXPORT_SECONDS, TRAIN_ROOTFS_SECONDS (mmdebstrap), TRAIN_COMMIT_SECONDS (buildah
#     add + commit), TRAIN_EXPORT_SECONDS: what the cold steps took when they ran
#   hack/testbed/build-node-images.sh import ADDRESS
#     the same, then imports both archives into the containerd at socket ADDRESS, namespace k8s.io,
#     unpacked for the snapshotter $TORCHRUN_SNAPSHOTTER (default overlayfs, the CRI's default);
#     an image already there under its exact name is skipped. Also prints IMPORT_SECONDS.
# On failure it exits non-zero with the reason on its last line of stderr.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

NODE_DIR="$CACHE_DIR/node-images"
SUITE=trixie
PYTHON_VERSION=3.13  # trixie's python3: where the PyPI layer goes
TRAIN_REQUIREMENTS="$HACK_DIR/testbed/train-requirements.txt"
MIRROR="${TORCHRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TRAIN_PACKAGES=python3,python-is-python3,python3-torch,python3-etcd,netbase
SNAPSHOTTER="${TORCHRUN_SNAPSHOTTER:-overlayfs}"

fail() {
  log "node images failed: $*"
  exit 1
}

need_tools() {
  need_debian buildah:buildah mmdebstrap:mmdebstrap || fail "buildah and mmdebstrap (Debian packages) are needed"
}

archive_of() {  # archive_of IMAGE: its archive's path (localhost/a:b -> a-b.tar)
  local base=${1#localhost/}
  echo "$NODE_DIR/${base//[:\/]/-}.tar"
}

export_image() {  # export_image IMAGE ARCHIVE STORAGE...: IMAGE from that storage into ARCHIVE
  local image=$1 archive=$2; shift 2
  # docker-archive:PATH:NAME writes NAME into manifest.json's RepoTags: the name ctr imports
  rm -f "$archive.tmp"
  buildah "$@" push --quiet "$image" "docker-archive:$archive.tmp:$image" >&2 \
    || { rm -f "$archive.tmp"; return 1; }
  mv "$archive.tmp" "$archive"
}

prune() {  # prune NAME ARCHIVE: remove NAME's other archives (each is 0.5-1.2 GB)
  find "$NODE_DIR" -maxdepth 1 \( -name "$1-*.tar" -o -name "$1-*.seconds" \) \
    ! -path "$2" ! -path "${2%.tar}.seconds" -delete
}

controller_image() {  # prints CONTROLLER_* lines; sets CONTROLLER_IMAGE and CONTROLLER_ARCHIVE
  local out image root runroot archive start
  out=$("$HACK_DIR/testbed/build-image.sh") || fail "hack/testbed/build-image.sh failed (its reason is above)"
  image=$(sed -n 's/^IMAGE=//p' <<<"$out")
  root=$(sed -n 's/^ROOT=//p' <<<"$out")
  runroot=$(sed -n 's/^RUNROOT=//p' <<<"$out")
  if [ -z "$image" ] || [ -z "$root" ] || [ -z "$runroot" ]; then
    fail "build-image.sh printed no IMAGE/ROOT/RUNROOT: $out"
  fi
  archive=$(archive_of "$image")
  if [ ! -f "$archive" ]; then
    log "exporting $image to $archive"
    start=$(date +%s)
    export_image "$image" "$archive" --storage-driver vfs --root "$root" --runroot "$runroot" \
      || fail "buildah could not export $image from $root"
    echo "CONTROLLER_EXPORT_SECONDS=$(( $(date +%s) - start ))" > "${archive%.tar}.seconds"
    log "exported in $(( $(date +%s) - start ))s ($(du -m "$archive" | cut -f1) MiB)"
    prune torchrun-controller "$archive"
  fi
  CONTROLLER_IMAGE=$image CONTROLLER_ARCHIVE=$archive
  echo "CONTROLLER_IMAGE=$image"
  echo "CONTROLLER_ARCHIVE=$archive"
  cat "${archive%.tar}.seconds" 2>/dev/null || echo "CONTROLLER_EXPORT_SECONDS=unknown"
}

train_key() {
  { echo "$SUITE $MIRROR $TRAIN_PACKAGES $PYTHON_VERSION"; grep -v '^#' "$TRAIN_REQUIREMENTS"; echo "$TORCH_PATCH"
    sed -n '/^train_wheels()/,/^train_image()/p' "$0"; } \
    | sha256sum | cut -c1-12
}

# Two patches to Debian's torch 2.6, each asserted to apply once (TORCH_PATCH):
# - it is built without libuv, yet every TCPStore torch makes asks for it by default (torchrun's
#   c10d and static rendezvous, init_process_group's env://), and the store refuses: "use_libuv was
#   requested but PyTorch was build without libuv support" — no world could form. The image's
#   torch.distributed.TCPStore always asks for the store it has (use_libuv=False);
# - accelerate gives every CPU process of a distributed run the device `cpu:0`, and the Hugging
#   Face Trainer resumes its optimizer with torch.load(map_location=that device), which torch 2.6
#   refuses ("don't know how to restore data location ... (tagged with cpu:0)"): the image's CPU
#   deserializer takes `cpu:<index>` as `cpu` (a CPU has one memory; later torch takes it too).
# So the workers run torchrun and their programs as written.
TORCH_PATCH='import pathlib, py_compile
site = pathlib.Path("/usr/lib/python3/dist-packages/torch")
def patch(rel, old, new):
    p = site / rel
    src = p.read_text()
    assert src.count(old) == 1, "not once in " + str(p) + ": " + old
    p.write_text(src.replace(old, new))
    py_compile.compile(str(p), doraise=True)
imported = "        TCPStore,\n        Work as _Work,\n    )\n"
patch("distributed/__init__.py", imported, imported + """
    class TCPStore(TCPStore):  # this build has no libuv (hack/testbed/build-node-images.sh)
        def __init__(self, *args, **kwargs):
            kwargs["use_libuv"] = False
            super().__init__(*args, **kwargs)
""")
patch("serialization.py", "def _cpu_deserialize(obj, location):\n    if location == \"cpu\":\n",
      "def _cpu_deserialize(obj, location):\n    if location == \"cpu\" or location.startswith(\"cpu:\"):\n")'

train_wheels() {  # train_wheels DIR: the PyPI layer, unpacked into DIR (site-packages layout)
  python3 -m pip install --quiet --no-deps --only-binary=:all: --no-compile \
    --python-version "$PYTHON_VERSION" --implementation cp --abi "cp${PYTHON_VERSION/./}" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    --target "$1" --requirement "$TRAIN_REQUIREMENTS" >&2 || return 1
  rm -rf "$1/bin"  # console scripts with this machine's interpreter path
}

# shellcheck disable=SC2016  # the hooks' "$1" (the root) is mmdebstrap's to expand
train_rootfs() {  # train_rootfs TAR WHEELS: the root filesystem of the training image
  local site="/usr/local/lib/python$PYTHON_VERSION/dist-packages"
  mmdebstrap --variant=apt --include="$TRAIN_PACKAGES" \
    --aptopt='APT::Install-Recommends "false"' --aptopt='Acquire::Retries "3"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="chroot \"\$1\" python3 -c 'import sys; assert sys.version_info[:2] == (${PYTHON_VERSION/./, })'" \
    --customize-hook='chroot "$1" python3 - <<"PY"
'"$TORCH_PATCH"'
PY' \
    --customize-hook="mkdir -p \"\$1$site\"" --customize-hook="copy-in $2/. $site" \
    --customize-hook="chroot \"\$1\" python3 -m compileall -q -j0 $site >&2" \
    --customize-hook='chroot "$1" sh -c "command -v torchrun && command -v python" >/dev/null' \
    --customize-hook='chroot "$1" python3 -c "import torch.distributed as d; assert d.is_gloo_available(); d.TCPStore(\"127.0.0.1\", 0, is_master=True)"' \
    --customize-hook='chroot "$1" python3 -c "import transformers, lightning, pytorch_lightning"' \
    --customize-hook='chroot "$1" python3 -c "import sitecustomize"' \
    "$SUITE" "$1" "$MIRROR" >&2
}

train_commit() {  # train_commit TAR IMAGE STORAGE...: TAR as the only layer of IMAGE
  local tar=$1 image=$2 ctr; shift 2
  ctr=$(buildah "$@" from scratch) || return 1
  buildah "$@" add "$ctr" "$tar" / >/dev/null || return 1
  buildah "$@" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr" || return 1
  buildah "$@" commit --quiet --rm "$ctr" "$image" >/dev/null
}

train_image() {  # prints TRAIN_* lines; sets TRAIN_IMAGE and TRAIN_ARCHIVE
  local key image archive work t0 t1 t2 t3
  key=$(train_key)
  image="localhost/torchrun-train:$key"
  archive=$(archive_of "$image")
  if [ ! -f "$archive" ]; then
    # a storage of its own, removed after the export: the archive is the cache
    work="$NODE_DIR/work-$key"
    local storage=(--storage-driver vfs --root "$work/storage" --runroot "$work/run")
    rm -rf "$work" && mkdir -p "$work"
    log "making the training image $image (mmdebstrap $SUITE: $TRAIN_PACKAGES)"
    t0=$(date +%s)
    train_wheels "$work/wheels" || fail "pip could not fetch the wheels of $TRAIN_REQUIREMENTS"
    train_rootfs "$work/rootfs.tar" "$work/wheels" \
      || fail "mmdebstrap could not make the $SUITE root filesystem from $MIRROR"
    t1=$(date +%s)
    train_commit "$work/rootfs.tar" "$image" "${storage[@]}" || fail "buildah could not commit $image"
    rm -rf "$work/rootfs.tar" "$work/wheels"
    t2=$(date +%s)
    export_image "$image" "$archive" "${storage[@]}" || fail "buildah could not export $image"
    t3=$(date +%s)
    buildah "${storage[@]}" rmi --all >/dev/null 2>&1 || true
    rm -rf "$work"
    printf 'TRAIN_ROOTFS_SECONDS=%s\nTRAIN_COMMIT_SECONDS=%s\nTRAIN_EXPORT_SECONDS=%s\n' \
      $((t1 - t0)) $((t2 - t1)) $((t3 - t2)) > "${archive%.tar}.seconds"
    log "training image made in $((t3 - t0))s ($(du -m "$archive" | cut -f1) MiB)"
    prune torchrun-train "$archive"
  fi
  TRAIN_IMAGE=$image TRAIN_ARCHIVE=$archive
  echo "TRAIN_IMAGE=$image"
  echo "TRAIN_ARCHIVE=$archive"
  cat "${archive%.tar}.seconds" 2>/dev/null \
    || printf 'TRAIN_ROOTFS_SECONDS=unknown\nTRAIN_COMMIT_SECONDS=unknown\nTRAIN_EXPORT_SECONDS=unknown\n'
}

import_images() {  # import_images ADDRESS: both archives into containerd at ADDRESS
  local address=$1 pair image archive start
  local ctr=(ctr --address "$address" --namespace k8s.io)
  start=$(date +%s)
  command -v ctr >/dev/null || fail "ctr (Debian's containerd package) is needed to import"
  "${ctr[@]}" version >/dev/null 2>&1 || fail "no containerd answers at $address"
  for pair in "$CONTROLLER_IMAGE $CONTROLLER_ARCHIVE" "$TRAIN_IMAGE $TRAIN_ARCHIVE"; do
    read -r image archive <<<"$pair"
    if [ -n "$("${ctr[@]}" images ls --quiet "name==$image")" ]; then
      log "$image is already in containerd"
      continue
    fi
    log "importing $image into containerd at $address"
    "${ctr[@]}" images import --snapshotter "$SNAPSHOTTER" "$archive" >&2 \
      || fail "ctr could not import $archive into $address"
    [ -n "$("${ctr[@]}" images ls --quiet "name==$image")" ] \
      || fail "after importing $archive, containerd has no image named $image"
  done
  echo "IMPORT_SECONDS=$(( $(date +%s) - start ))"
}

main() {
  local mode=${1:-build}
  case $mode in
    build) ;;
    import) [ $# -eq 2 ] || fail "usage: $0 import ADDRESS" ;;
    *) fail "usage: $0 [import ADDRESS]" ;;
  esac
  cd "$REPO_DIR"
  need_tools
  mkdir -p "$NODE_DIR"
  exec 9>"$NODE_DIR/.lock"
  flock 9
  controller_image
  train_image
  [ "$mode" = build ] || import_images "$2"
}

main "$@"
