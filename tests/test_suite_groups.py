"""The suite's own scheduling: tests that share a costly module- or session-scoped fixture run
on one pytest-xdist worker (tests/conftest.py marks them, ``--dist loadgroup`` reads the mark).
pytest 9.2 moved a node's id where pytest-xdist 3.8 no longer renames it, and every group was
ignored without a word: a ~70 s cluster job then ran once on each worker."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def shared_fixture() -> object:
    return object()


def test_a_test_on_a_shared_fixture_carries_its_group(shared_fixture, request):
    if not os.environ.get("PYTEST_XDIST_WORKER") or not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run under pytest-xdist's --dist loadgroup")
    assert request.node.nodeid.endswith(".shared_fixture"), request.node.nodeid
    assert "@" in request.node.nodeid, request.node.nodeid
