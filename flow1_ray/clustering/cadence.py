"""When the next state snapshot may run: every ``heatmap_every`` iterations, held under a
share of one core.

A snapshot clusters the window, judges it and draws its heatmap PNG: ~0.02-0.08 s of CPU
to cluster 1,000-5,000 states of 256 features, 0.2-0.4 s to draw (matplotlib's text, most
of it; measured on this project's 2-core machine). On Pong with 500-step batches an
iteration takes ~1 s, so a snapshot every 10 iterations took ~2.5 % of a core beside the
run. The cadence is therefore held under ``heatmap_budget`` (a share of one core, default
1 %): a request that comes sooner than the last snapshot's CPU time / ``heatmap_budget``
after it is skipped and its states stay in the window (a bounded uniform sample), so the
next snapshot judges them; none is lost, the heatmaps just come further apart. A request
that comes while the last round is still being computed is skipped too. The run's
last snapshot, at its close, is never skipped. Said once (HEATMAPS_SPACED), with the cost
and the spacing; ``heatmap_budget=0`` draws every ``heatmap_every`` iterations whatever it
costs. Pure: no Ray, no clock of its own (the caller passes ``now``).
"""

from __future__ import annotations

from .. import codes as C
from ..checks.findings import Finding
from ..checks.rule import Rule

RULES = (
    Rule("HEATMAPS_SPACED", C.FLOW1, C.PASS,
         "the state snapshots (clustering and heatmap) would take more than heatmap_budget of a core at "
         "heatmap_every: later ones come further apart, their states kept for the next (said once per run)",
         evidence=("cost_s", "spacing_s", "heatmap_budget", "heatmap_every", "skipped")),
)


class SnapshotBudget:
    """The spacing of one clusterer's snapshots (all modules' snapshots of one request are one round)."""

    def __init__(self, budget: float = 0.01) -> None:
        self.budget = float(budget)
        self.last_at: float | None = None   # when the last round was queued
        self.cost_s = 0.0                   # the last round's CPU time, its heatmaps' drawing included
        self.skipped = 0
        self.told = False

    def spacing_s(self) -> float:
        """The least time between two rounds at the last round's cost (0: no limit)."""
        return self.cost_s / self.budget if self.budget > 0 else 0.0

    def due(self, now: float, computing: bool = False) -> bool:
        """Whether a round asked for at ``now`` may run (a skipped one is counted); with a
        budget, never while the last one is still ``computing`` (its cost is not known yet)."""
        if (self.budget > 0 and computing) or (self.last_at is not None and now - self.last_at < self.spacing_s()):
            self.skipped += 1
            return False
        return True

    def started(self, now: float) -> None:
        """A round was queued at ``now``: the next is spaced from here."""
        self.last_at = now

    def spaced_finding(self, heatmap_every: int | None = None) -> Finding | None:
        """HEATMAPS_SPACED, once: after the first skipped request."""
        if not self.skipped or self.told:
            return None
        self.told = True
        every = f"every {heatmap_every} iterations" if heatmap_every else "at each request"
        return Finding(C.HEATMAPS_SPACED,
                       f"state snapshots spaced: one (clustering and its heatmap) took {self.cost_s:.2f} s of CPU; "
                       f"held under heatmap_budget {self.budget:.0%} of a core, the next comes at least "
                       f"{self.spacing_s():.0f} s after the last instead of {every}; the states of a skipped "
                       f"snapshot are judged by the next, none is lost; heatmap_budget=0 draws {every}",
                       {"cost_s": round(self.cost_s, 3), "spacing_s": round(self.spacing_s(), 1),
                        "heatmap_budget": self.budget, "heatmap_every": heatmap_every, "skipped": self.skipped},
                       status=C.PASS)
