"""The Grafana dashboard against the schema Grafana publishes: @grafana/schema (npm, the
TypeScript declarations Grafana generates from its CUE kinds; hack/testbed/build-grafana-schema.sh
fetches the pinned version) — the dashboard JSON, as an object literal typed `Dashboard`, must
type-check under TypeScript's compiler: every field Grafana knows, of its type, and no field it
does not know (an object literal's excess properties are errors)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from monitoring import DASHBOARD
from testbed import cache_dir, pins

DASHBOARD_TYPES = "@grafana/schema/dist/types/raw/dashboard/x/types.gen"


def node_modules() -> Path:
    path = cache_dir() / f"grafana-schema-{pins()['GRAFANA_SCHEMA_VERSION']}" / "node_modules"
    if not (path / ".bin" / "tsc").exists() or not (path / "@grafana" / "schema").is_dir():
        pytest.fail(
            f"Grafana's schema is not there: run hack/testbed/build-grafana-schema.sh (expects {path})"
        )
    return path


def type_check(board: dict[str, object], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    modules = node_modules()
    source = tmp_path / "dashboard.ts"
    source.write_text(
        f'import type {{ Dashboard }} from "{modules / DASHBOARD_TYPES}";\n'
        f"export const board: Dashboard = {json.dumps(board, indent=1)};\n"
    )
    command = [str(modules / ".bin" / "tsc"), "--noEmit", "--strict", "--target", "es2020", str(source)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_the_dashboard_type_checks_against_grafanas_published_schema(tmp_path: Path) -> None:
    checked = type_check(json.loads(DASHBOARD.read_text()), tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_field_grafana_does_not_know_fails_the_check(tmp_path: Path) -> None:
    board = json.loads(DASHBOARD.read_text())
    board["refreshInterval"] = "30s"  # Grafana's field is `refresh`
    checked = type_check(board, tmp_path)
    assert checked.returncode != 0 and "refreshInterval" in checked.stdout, checked.stdout
