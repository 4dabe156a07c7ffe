"""Each KMeans call on the faster of two engines at its size, from their measured times.

A GPU engine (torch-CUDA, cuML) pays a fixed cost per call (the copies to and from the
device, kernel launches, a sync per Lloyd step) that scikit-learn on one core does not; a
small window of states is clustered faster on the CPU, a 50,000-row refit far faster on the
GPU. Where the two cross depends on the GPU, the CPU, k and the state's width, so the
threshold is measured where the clusterer runs, not fixed: every call is timed, each engine's
time per operation is fitted as ``a + b * n * k * d`` over its last calls, and a call goes to
the engine predicted faster at its size. Each engine is tried on the first calls of each
operation (not on a fit whose Lloyd steps its own assignments show to be hopeless), and the
slower one again every ``EXPLORE_EVERY`` calls when its predicted time is within
``EXPLORE_CAP`` of the faster's (a hopeless one is not re-tried at full cost). A GPU
engine that raises (out of memory, a lost device) hands the call to the CPU; after
``MAX_FAILURES`` it is no longer used, and :meth:`status` says why.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

#: the calls per operation and engine remembered for the fit of its time
HISTORY = 16
#: calls each engine runs of an operation before the router chooses by prediction
MIN_TRIES = 2
#: one call in this many goes to the engine predicted slower, when it is within EXPLORE_CAP
EXPLORE_EVERY = 32
EXPLORE_CAP = 4.0
#: failures of the accelerated engine after which it is left
MAX_FAILURES = 3


class CostModel:
    """One engine's time for one operation, ``a + b * work``, by least squares over its
    last ``HISTORY`` calls (``a``, ``b`` >= 0; one size seen: its median time). The first
    call is left out: it pays one-off costs (imports, a device's context, kernel builds;
    scikit-learn's first fit here took 1.4 s against its steady 10-100 ms)."""

    def __init__(self) -> None:
        self.calls: deque[tuple[float, float]] = deque(maxlen=HISTORY)
        self.first: tuple[float, float] | None = None
        self._fitted: tuple[float, float] | None = None   # (a, b) until the next call is added

    def add(self, work: float, seconds: float) -> None:
        if self.first is None:
            self.first = (float(work), float(seconds))
        else:
            self.calls.append((float(work), float(seconds)))
            self._fitted = None

    @property
    def tries(self) -> int:
        """Calls run, the first included (what the exploration counts)."""
        return len(self.calls) + (self.first is not None)

    def __len__(self) -> int:
        return len(self.calls)

    def coefficients(self) -> tuple[float, float]:
        if self._fitted is None:
            self._fitted = self._fit()
        return self._fitted

    def _fit(self) -> tuple[float, float]:
        w = np.array([c[0] for c in self.calls])
        t = np.array([c[1] for c in self.calls])
        if len(w) == 0:
            return 0.0, 0.0
        if np.ptp(w) <= 0.05 * max(float(w.max()), 1.0):   # one size: no slope to fit
            return float(np.median(t)), 0.0
        b = float(np.cov(w, t, bias=True)[0, 1] / np.var(w))
        b = max(b, 0.0)
        a = max(float(np.mean(t) - b * np.mean(w)), 0.0)
        return a, b

    def predict(self, work: float) -> float:
        a, b = self.coefficients()
        return a + b * work


def _work(x: np.ndarray, k: int) -> float:
    return float(x.shape[0]) * max(int(k), 1) * (x.shape[1] if x.ndim == 2 else 1)


class CrossoverKMeans:
    """A KMeans backend (``fit``, ``assign``) that runs each call on ``fast`` (a GPU
    engine) or ``cpu`` (scikit-learn), whichever its measured times predict faster."""

    def __init__(self, fast: Any, cpu: Any) -> None:
        self.fast, self.cpu = fast, cpu
        self.name = f"{fast.name}+{cpu.name}"
        self.models: dict[tuple[str, str], CostModel] = {}
        self.chosen: dict[str, int] = {fast.name: 0, cpu.name: 0}
        self.failures = 0
        self.last_failure = ""
        self._calls: dict[str, int] = {}
        self._last_shape: tuple[int, int] | None = None   # (k, d) of the last call
        self.fits_kept_off: dict[str, int] = {fast.name: 0, cpu.name: 0}   # untried fits judged hopeless

    def _model(self, engine: Any, op: str) -> CostModel:
        return self.models.setdefault((engine.name, op), CostModel())

    def preferred(self, op: str, work: float) -> Any | None:
        """The engine predicted faster for ``op`` at this ``work`` (rows x k x d); None
        until each has run it ``MIN_TRIES`` times past its first call."""
        fast, cpu = self.models.get((self.fast.name, op)), self.models.get((self.cpu.name, op))
        if not fast or not cpu or len(fast) < MIN_TRIES or len(cpu) < MIN_TRIES:
            return None
        return self.fast if fast.predict(work) <= cpu.predict(work) else self.cpu

    def pick(self, op: str, work: float) -> Any:
        """The engine for one call: each tried in turn until both are measured, then the
        one predicted faster, the other every ``EXPLORE_EVERY`` calls while it is within
        ``EXPLORE_CAP`` of it."""
        if self.failures >= MAX_FAILURES:
            return self.cpu
        fast, cpu = self._model(self.fast, op), self._model(self.cpu, op)
        n = self._calls[op] = self._calls.get(op, 0) + 1
        best = self.preferred(op, work)
        if best is None:
            first = self.fast if fast.tries <= cpu.tries else self.cpu
            second = self.cpu if first is self.fast else self.fast
            if op == "fit" and self._hopeless_fit(first, second, work):
                self.fits_kept_off[first.name] += 1
                return second
            return first
        other = self.cpu if best is self.fast else self.fast
        t_best, t_other = self._model(best, op).predict(work), self._model(other, op).predict(work)
        if n % EXPLORE_EVERY == 0 and t_other <= EXPLORE_CAP * max(t_best, 1e-6):
            return other
        return best

    def _hopeless_fit(self, engine: Any, other: Any, work: float) -> bool:
        """Whether trying ``engine`` on a fit would be a waste: a Lloyd step costs at least
        one assignment, and ``engine``'s measured assignments at this size already take
        ``EXPLORE_CAP`` times ``other``'s measured Lloyd step (a 50,000-row refit on one CPU
        core, seconds, beside a GPU's milliseconds)."""
        assign, step = self.models.get((engine.name, "assign")), self.models.get((other.name, "fit"))
        if not assign or len(assign) < MIN_TRIES or not step or len(step) < 1:
            return False
        return assign.predict(work) > EXPLORE_CAP * step.predict(work)

    def _run(self, op: str, x: np.ndarray, k: int, call: Any) -> Any:
        work = _work(x, k)
        self._last_shape = (int(k), int(x.shape[1]) if x.ndim == 2 else 1)
        engine = self.pick(op, work)
        t0 = time.perf_counter()
        try:
            out = call(engine)
        except Exception as e:
            if engine is self.cpu:
                raise
            self.failures += 1
            self.last_failure = f"{type(e).__name__}: {e}"[:300]
            if self.failures == MAX_FAILURES:
                logger.warning("flow1: the clusterer leaves %s after %d failures (the last: %s); "
                               "scikit-learn clusters from now on", self.fast.name, self.failures, self.last_failure)
            engine, t0 = self.cpu, time.perf_counter()
            out = call(engine)
        seconds = time.perf_counter() - t0
        if op == "fit":  # a fit's time per Lloyd step: each engine stops when its labels settle
            seconds /= max(int(getattr(out, "iterations", 1) or 1), 1)
        self._model(engine, op).add(work, seconds)
        self.chosen[engine.name] += 1
        return out

    def fit(self, x: np.ndarray, k: int, seed: int = 0, max_iter: int = 20) -> Any:
        """Lloyd from k-means++ seeds on the engine predicted faster per Lloyd step (its
        model: the fit's time / its steps, the seeding included)."""
        return self._run("fit", x, k, lambda e: e.fit(x, k, seed=seed, max_iter=max_iter))

    def assign(self, x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._run("assign", x, len(centroids), lambda e: e.assign(x, centroids))

    def crossover(self, op: str = "fit") -> dict[str, Any] | None:
        """Where the engines' predicted times for ``op`` cross, at the last call's k and d:
        ``{"rows": R, "below": faster under R rows, "above": faster over}`` (``rows`` None,
        ``below`` = ``above``: one engine is faster at every size); None before both ran."""
        fast, cpu = self.models.get((self.fast.name, op)), self.models.get((self.cpu.name, op))
        if not fast or not cpu or len(fast) < MIN_TRIES or len(cpu) < MIN_TRIES or self._last_shape is None:
            return None
        (af, bf), (ac, bc) = fast.coefficients(), cpu.coefficients()
        small = self.fast.name if af <= ac else self.cpu.name
        large = self.fast.name if (bf, af) <= (bc, ac) else self.cpu.name
        if small == large:
            return {"rows": None, "below": small, "above": small}
        rows = (af - ac) / (bc - bf) / float(np.prod(self._last_shape))
        return {"rows": int(round(rows)), "below": small, "above": large}

    def status(self) -> dict[str, Any]:
        """What the router chose and measured: calls per engine, where each operation's
        engines cross (at the last call's k and d; a fit's stays None while one engine's fits
        are kept off as hopeless before it was measured: ``fits_kept_off``), and the
        accelerated engine's failures (a fused kernel that failed inside it, its chunked path
        answering since: ``fast_fused_error``)."""
        return {"engines": dict(self.chosen), "crossover": {op: self.crossover(op) for op in ("fit", "assign")},
                "fits_kept_off": dict(self.fits_kept_off),
                "shape_kd": list(self._last_shape) if self._last_shape else None,
                "fast_failures": self.failures, "fast_last_failure": self.last_failure,
                "fast_fused_error": getattr(self.fast, "fused_error", None)}


def choose_engine(requested: str, resolved: str, device: str | None = None) -> Any:
    """The engine a clusterer runs: with ``auto`` resolved to a GPU engine (torch, cuML),
    the GPU engine and scikit-learn behind :class:`CrossoverKMeans`; a backend named by the
    user runs alone (torch on ``device``)."""
    from .backends import CumlKMeans, SklearnKMeans, TorchKMeans

    if resolved == "sklearn":
        return SklearnKMeans()
    fast = TorchKMeans(device) if resolved == "torch" else CumlKMeans()
    return CrossoverKMeans(fast, SklearnKMeans()) if requested == "auto" else fast
