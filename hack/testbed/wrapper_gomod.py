"""Write a wrapper go.mod that builds a Go main package whose own go.mod uses local replaces.

Go ignores `replace` directives of a dependency, so `go install k8s.io/kubernetes/cmd/...@v1.34.x`
fails: its staging modules (`k8s.io/api => ./staging/src/k8s.io/api`, ...) only exist in its
repository. This script reads the upstream go.mod as published on the module proxy and writes a
go.mod for a tiny wrapper module that requires the upstream module and replaces every module the
upstream replaced with a local path by that module's *published* version. The list is derived from
the upstream go.mod, never hard-coded, so a new release brings its own list.

Usage: wrapper_gomod.py UPSTREAM_GO_MOD MODULE VERSION LOCAL_VERSION WRAPPER_NAME > go.mod
  LOCAL_VERSION is the published version of the locally replaced modules that the upstream
  requires only as a placeholder (`v0.0.0`: v0.34.4 for Kubernetes v1.34.4); a locally replaced
  module the upstream requires at a real version keeps it (etcd 3.5 requires its siblings at
  v3.5.x, and client/v2 at v2.305.x).
"""

from __future__ import annotations

import re
import sys

_REQ_LINE = re.compile(r"^\s*([^\s]+)\s+(v[^\s]+)(\s*//.*)?$")
_REPLACE_LINE = re.compile(r"^\s*([^\s]+)(?:\s+v[^\s]+)?\s*=>\s*([^\s]+)(?:\s+(v[^\s]+))?\s*$")


def _blocks(text: str, keyword: str) -> list[str]:
    """Lines of every `keyword (...)` block and every single-line `keyword x`."""
    out: list[str] = []
    inside = False
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].rstrip() if keyword == "replace" else raw.rstrip()
        stripped = line.strip()
        if inside:
            if stripped == ")":
                inside = False
            elif stripped:
                out.append(stripped)
        elif stripped == f"{keyword} (":
            inside = True
        elif stripped.startswith(keyword + " "):
            out.append(stripped[len(keyword) + 1 :].strip())
    return out


def wrapper(upstream: str, module: str, version: str, local_version: str, name: str) -> str:
    local: set[str] = set()
    for line in _blocks(upstream, "replace"):
        m = _REPLACE_LINE.match(line)
        if m and m.group(2).startswith((".", "/")) and "FORBIDDEN" not in m.group(2):
            local.add(m.group(1))
    requires: dict[str, str] = {}
    for line in _blocks(upstream, "require"):
        m = _REQ_LINE.match(line)
        if m:
            requires[m.group(1)] = m.group(2)
    for mod in local:
        if requires.get(mod, "v0.0.0").startswith("v0.0.0"):
            requires[mod] = local_version
    requires[module] = version
    go_line = next((ln for ln in upstream.splitlines() if ln.startswith("go ")), "go 1.24")
    godebug = [ln for ln in upstream.splitlines() if ln.startswith("godebug ")]
    out = [f"module torchrun.ai/testbed/{name}", "", go_line, *godebug, "", "require ("]
    out += [f"\t{mod} {ver}" for mod, ver in sorted(requires.items())]
    out += [")", "", "replace ("]
    out += [f"\t{mod} => {mod} {requires[mod]}" for mod in sorted(local)]
    out += [")", ""]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        sys.stdout.write(wrapper(f.read(), *argv[2:6]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
