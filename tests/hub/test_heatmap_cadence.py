"""The state snapshots' cadence held under ``heatmap_budget`` (flow1_ray/checks/own/budgets.py):
a snapshot asked for sooner than its last one's CPU time / budget is skipped, said once
(HEATMAPS_SPACED), and its states are judged by the next; ``heatmap_budget=0`` runs every one."""

from __future__ import annotations

import time

import numpy as np
import pytest

from flow1_ray.common import codes as C
from flow1_ray.hub.clusterer import StatesService
from flow1_ray.checks.own.budgets import SnapshotBudget


@pytest.mark.parametrize("budget, cost, gap, due", [
    (0.01, 0.25, 10.0, False),    # 0.25 s of CPU at 1 % of a core: 25 s apart
    (0.01, 0.25, 26.0, True),
    (0.05, 0.25, 6.0, True),      # 5 s apart
    (0.0, 5.0, 0.1, True),        # no budget: every request runs
])
def test_a_request_runs_once_the_last_ones_cost_is_paid(budget, cost, gap, due):
    b = SnapshotBudget(budget)
    assert b.due(100.0)           # the first always runs
    b.started(100.0)
    b.cost_s = cost
    assert b.due(100.0 + gap) is due
    assert b.skipped == (0 if due else 1)


def test_with_a_budget_no_request_waits_behind_a_round_being_computed():
    b = SnapshotBudget(0.01)
    assert not b.due(0.0, computing=True) and b.skipped == 1
    assert SnapshotBudget(0.0).due(0.0, computing=True)   # no budget: queued behind it, as before


def test_spacing_is_said_once_with_its_numbers():
    b = SnapshotBudget(0.01)
    assert b.spaced_finding(10) is None       # nothing skipped yet: nothing to say
    b.started(0.0)
    b.cost_s = 0.3
    assert not b.due(5.0) and not b.due(10.0)
    f = b.spaced_finding(10)
    assert f.code == C.HEATMAPS_SPACED and f.status == C.PASS
    assert "took 0.30 s of CPU" in f.message and "at least 30 s after the last instead of every 10 iterations" in f.message
    assert f.evidence["skipped"] == 2 and f.evidence["spacing_s"] == 30.0
    assert b.spaced_finding(10) is None


def _rows(rng: np.random.Generator, n: int) -> dict:
    centers = np.array([[0.0, 0.0], [5.0, 5.0], [-5.0, 5.0]], np.float32)
    c = rng.integers(0, 3, n)
    x = centers[c] + rng.normal(0, 0.3, (n, 2)).astype(np.float32)
    return {"x": x, "a": c % 2, "fail": np.zeros(n, bool), "labels": ["0", "1"]}


def _service(budget: float) -> tuple[StatesService, list, list]:
    delivered, reported = [], []
    svc = StatesService(delivered.append, n_clusters=3, backend="sklearn", report=reported.extend,
                        heatmap_budget=budget, render_cpu_s=lambda: 0.05, heatmap_every=10)
    return svc, delivered, reported


def test_a_spaced_snapshot_keeps_its_states_for_the_next():
    """A real service (scikit-learn, its own thread): the first snapshot runs; the next ones,
    asked for at once, are skipped under a 1 % budget (their cost is at least the 0.05 s of
    drawing: 5 s apart), said once; the run's last snapshot judges every state that came."""
    rng = np.random.default_rng(0)
    svc, delivered, reported = _service(0.01)
    svc.ingest(_rows(rng, 300))
    assert svc.snapshot(10)
    assert svc.finish(None, None, 30.0)          # wait for the first round
    assert len(delivered) == 1
    svc.ingest(_rows(rng, 200))
    assert not svc.snapshot(20)
    svc.ingest(_rows(rng, 100))
    assert not svc.snapshot(30)
    spaced = [e for e in reported if e["code"] == C.HEATMAPS_SPACED]
    assert len(spaced) == 1 and spaced[0]["evidence"]["skipped"] == 1
    status = svc.status()
    assert status["snapshots_spaced"] == 2 and status["snapshot_cost_s"] >= 0.05
    assert status["window"] == 300                # the skipped snapshots' states wait in the window
    assert svc.finish(40, None, 30.0)             # the close is never skipped
    assert len(delivered) == 2
    last = delivered[-1]
    assert last["iteration"] == 40 and "300 of 300 states" in last["heatmap"]["title"]


def test_requests_skipped_while_the_first_round_computes_are_said_at_the_close():
    """A busy machine: the next requests come while the first round is still computing (its
    cost not known yet), so they are skipped without a word; the close, once that round is
    done, says them (HEATMAPS_SPACED) with its cost."""
    rng = np.random.default_rng(3)
    delivered, reported = [], []
    # no drawing in this process: the cost is the clustering thread's, known when its round ends
    svc = StatesService(delivered.append, n_clusters=3, backend="sklearn", report=reported.extend,
                        heatmap_budget=0.01, render_cpu_s=lambda: 0.0, heatmap_every=1)
    svc.ingest(_rows(rng, 3000))
    assert svc.snapshot(1)
    skipped = [svc.snapshot(it) for it in (2, 3) if svc._queue.unfinished_tasks]
    assert skipped and not any(skipped), "asked while the first round was computing"
    assert svc.finish(None, None, 30.0)
    spaced = [e for e in reported if e["code"] == C.HEATMAPS_SPACED]
    assert len(spaced) == 1 and spaced[0]["evidence"]["skipped"] == len(skipped), reported
    assert spaced[0]["evidence"]["cost_s"] > 0


def test_without_a_budget_every_request_runs():
    rng = np.random.default_rng(1)
    svc, delivered, reported = _service(0.0)
    for it in (1, 2, 3):
        svc.ingest(_rows(rng, 200))
        assert svc.snapshot(it)
        assert svc.finish(None, None, 30.0)
    assert [d["iteration"] for d in delivered] == [1, 2, 3]
    assert not [e for e in reported if e["code"] == C.HEATMAPS_SPACED]
    assert svc.status()["snapshots_spaced"] == 0


def test_an_unreadable_drawing_cost_leaves_the_clustering_cost():
    rng = np.random.default_rng(2)
    delivered: list = []

    def broken() -> float:
        raise RuntimeError("no writer")

    svc = StatesService(delivered.append, n_clusters=3, backend="sklearn", heatmap_budget=0.01, render_cpu_s=broken)
    svc.ingest(_rows(rng, 300))
    assert svc.snapshot(1) and svc.finish(None, None, 30.0)
    t0 = time.monotonic()
    svc.ingest(_rows(rng, 300))
    got = svc.snapshot(2)   # spaced by the clustering's own CPU time alone (a refit: well over 10 ms)
    assert got is (time.monotonic() - t0 >= svc.cadence.spacing_s())
    assert svc.cadence.cost_s == svc._round_cpu_s > 0


