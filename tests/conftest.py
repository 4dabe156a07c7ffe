"""Shared test setup: the fault zoo is importable as ``zoo`` (also from CLI subprocesses)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for ``python -m flow1_ray`` subprocesses: zoo importable, no colour."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    env["NO_COLOR"] = "1"
    return env
