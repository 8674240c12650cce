#!/usr/bin/env python3
"""Write crd/ from the Python API types (controller/api); `--check` only reports drift.

hack/gen-crds.py           regenerate crd/*.yaml
hack/gen-crds.py --check   exit 1 if crd/ differs from what the types generate
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.api.crds import crd_manifests, render  # noqa: E402 - needs the repo on sys.path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args()
    out_dir = REPO / "crd"
    stale = []
    for name, manifest in crd_manifests().items():
        path = out_dir / name
        text = render(manifest)
        if path.exists() and path.read_text() == text:
            continue
        stale.append(name)
        if not args.check:
            out_dir.mkdir(exist_ok=True)
            path.write_text(text)
    if args.check and stale:
        print(f"crd/ is out of date ({', '.join(stale)}): run hack/gen-crds.py", file=sys.stderr)
        return 1
    for name in stale:
        print(f"wrote crd/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
