"""``Flow1Callbacks.with_options(whatif=True)``: the first learner finding that advises a
knob launches ``flow1 whatif``'s branches beside the run, and their verdicts come back as
events.

In the driver, in a thread of its own: the checkpoint is the newest rolling one taken
before the finding (``checkpoint_every``), else one saved now under
``RUN_DIR/checkpoints/``; the branches are Ray tasks that take CPUs the cluster has free
(on a cluster busy with the run they wait, and the run never does); ``train()`` never waits
for any of it. A run that stops first cancels the branches in flight and says so.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from ..common import codes as C
from ..common import schema as S
from ..common.events import Event
from ..rundir.store import Location


class LiveWhatif:
    """At most ``opts.whatif_max`` what-ifs per run, one at a time."""

    def __init__(self, algorithm: Any, opts: Any, run_id: str) -> None:
        self.algorithm, self.opts, self.run_id = algorithm, opts, run_id
        self.launched = 0
        self.thread: threading.Thread | None = None
        self.stop_flag = threading.Event()

    def run_dir(self) -> Location:
        return Location(self.opts.resolved_output_dir()) / self.run_id

    def maybe_launch(self, events: list[Event], iteration: int, kept: list[str],
                     send: Callable[[str, Any], Any]) -> Event | None:
        """A WHATIF_STARTED event when this iteration's findings launched one, else None."""
        from ..whatif.plan import Advice, Source, checkpoint_iteration, plan

        if self.launched >= self.opts.whatif_max or (self.thread is not None and self.thread.is_alive()):
            return None
        advice = [Advice(e.code, (e.evidence or {}).get("module_id"), e.status,
                         tuple(k for k in (e.evidence or {}).get("knobs") or [] if isinstance(k, dict)), e.message,
                         e.iteration if e.iteration is not None else iteration)
                  for e in events if e.status in (C.WARN, C.FAIL) and (e.evidence or {}).get("knobs")]
        if not advice:
            return None
        advice = diagnosis_first(events, advice)
        run_dir = self.run_dir()
        if not run_dir.local:
            self.launched = self.opts.whatif_max
            return Event(C.WHATIF_VERDICT, f"no live what-if: the run directory {run_dir} is not a local path (the "
                                           f"branches read their checkpoint from a local folder)",
                         {"run_dir": str(run_dir)}, iteration=iteration)
        checkpoint, taken = self._checkpoint(kept, advice, iteration)
        source = Source(Path(checkpoint), Path(run_dir.path), checkpoint_iteration(Path(checkpoint)), advice)
        branches = plan(source, [], True)
        self.launched += 1
        self.thread = threading.Thread(target=self._run, args=(source, branches, send), name="flow1-whatif",
                                       daemon=True)
        self.thread.start()
        names = [b.name for b in branches]
        return Event(C.WHATIF_STARTED, (
            f"{', '.join(sorted({a.code for a in advice}))} advised knobs: branching from {checkpoint} ({taken}) into "
            f"{', '.join(names)}, {self.opts.whatif_seeds} seeds x {self.opts.whatif_iterations} iterations, at most "
            f"{self.opts.whatif_parallel} at once on CPUs the cluster has free"),
            {"checkpoint": checkpoint, "branches": names, "findings": [a.code for a in advice],
             "seeds": self.opts.whatif_seeds, "iterations": self.opts.whatif_iterations}, iteration=iteration)

    def _checkpoint(self, kept: list[str], advice: list, iteration: int) -> tuple[str, str]:
        """The newest rolling checkpoint taken before the finding, else one saved now."""
        from ..whatif.plan import checkpoint_iteration

        first = min(a.iteration for a in advice)
        before = [p for p in kept if (checkpoint_iteration(Path(p)) or first) < first]
        if before:
            return before[-1], "the newest rolling checkpoint before the finding"
        path = self.run_dir() / S.CHECKPOINTS_DIR / f"iter{iteration:06d}"
        self.algorithm.save_to_path(str(path))
        return str(path), "saved at the finding: no rolling checkpoint before it (checkpoint_every)"

    def _run(self, source: Any, branches: list, send: Callable[[str, Any], Any]) -> None:
        from ..whatif.run import run_source

        try:
            o = run_source(source, branches, Path(self.run_dir().path) / S.WHATIF_DIR,
                           iterations=self.opts.whatif_iterations, seeds=self.opts.whatif_seeds,
                           parallel=self.opts.whatif_parallel, stop=self.stop_flag)
            events = verdict_events(o)
        except Exception as e:   # noqa: BLE001 -- a what-if that fails is said, the run goes on
            from ..checks.own.watchers import error_line

            events = [Event(C.WHATIF_VERDICT, f"the live what-if failed: {error_line(e)}",
                            {"error": error_line(e)})]
        try:
            send("events", [e.to_dict() for e in events])
        except Exception:   # noqa: BLE001 -- the run's hub may be gone at its end
            pass

    def stop(self, timeout_s: float = 5.0) -> None:
        """At the run's stop: branches in flight cancelled (their what-if says so)."""
        self.stop_flag.set()
        if self.thread is not None:
            self.thread.join(timeout_s)


def verdict_events(o: Any) -> list[Event]:
    """One WHATIF_VERDICT per verdict row (or one saying why there is none)."""
    where = {"whatif_dir": str(o.out_dir), "checkpoint": str(o.source.checkpoint)}
    if o.cut:
        return [Event(C.WHATIF_VERDICT, f"the live what-if was cut: the run stopped before its branches finished "
                                        f"({len(o.results)} run(s) done); {o.out_dir} holds what ran", where)]
    out = [Event(C.WHATIF_VERDICT, f"what-if {v['branch']} for {v['finding'] or 'the return'}: {v['verdict']}: "
                                   f"{v['why']}", {**where, **{k: v.get(k) for k in (
                                       "branch", "finding", "module_id", "verdict", "signal", "symptom", "return",
                                       "readback")}})
           for v in o.verdicts]
    for r in o.failed():
        out.append(Event(C.WHATIF_VERDICT, f"what-if branch {r.branch} seed {r.seed} failed: {r.error}",
                         {**where, "branch": r.branch, "seed": r.seed, "error": r.error}))
    return out


def diagnosis_first(events: list[Event], advice: list) -> list:
    """The advice in the order the what-if should test it: the change of the diagnosis's most
    likely cause first (its finding's branch first, that knob first in it), so that the first
    verdict to arrive is on the cause, and the diagnosis's standing for it updates. Any other
    order is kept; a diagnosis that cannot be made leaves the advice as it came."""
    from dataclasses import replace

    from ..diagnosis.diagnose import diagnose

    try:
        causes = diagnose(events).to_dict()["causes"]
        change = (causes[0] if causes else {}).get("change") or {}
    except Exception:   # noqa: BLE001 -- the order is a preference, never a failure of the run
        return advice
    if not change:
        return advice
    out = []
    for a in advice:
        if a.code == change.get("from"):
            a = replace(a, knobs=tuple(sorted(a.knobs, key=lambda k: k.get("knob") != change.get("knob"))))
        out.append(a)
    return sorted(out, key=lambda a: a.code != change.get("from"))
