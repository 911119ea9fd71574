"""docs/api.md is what ``scripts/api_doc.py`` makes of the app's OpenAPI document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_docs_api_md_matches_the_openapi_document() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "api_doc.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
