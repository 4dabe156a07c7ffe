"""What ``reset(seed)`` must restore, probed by the drive of ``flow1 check``
(:class:`ResetProbes`, a part of :class:`~flow1_ray.envcheck.drive.DriverBase`): two seeded
resets that differ (NONDETERMINISTIC_RESET, and the wrapper layer that keeps state), the first
episode replayed after the run from a new ``reset(seed)`` (RESET_KEEPS_STATE: a step counter, a
terminal flag, a previous observation that reset() does not restore, and the crash at the first
step of later episodes that such state causes), and unseeded resets after a seeded one. The
layers and attribute snapshots are :mod:`flow1_ray.envcheck.reset_state`'s.
"""

from __future__ import annotations

from typing import Any

from ..checks.findings import Finding
from ..checks.values import values_equal
from ..common import codes as C
from .reset_state import divergence, keeps_state_by_design, kept_fields, snapshot, stateful_layer


class ResetProbes:
    """The reset probes of a driver (it has ``env``, ``seed``, ``rc``, ``watch``, ``_reset``
    and ``first_episode``)."""

    def _unseeded_after_seeded(self) -> None:
        """After the run: reset(seed); reset() twice, the two unseeded observations must agree
        (gymnasium's own check: an env that rebuilds its RNG from seed=None fails it)."""
        u1 = self._reset(None) if self._reset(self.seed) is not None else None
        u2 = self._reset(None) if u1 is not None and self._reset(self.seed) is not None else None
        if u2 is None:
            return
        if not values_equal(u1[0], u2[0]):
            self.rc.record(Finding(C.NONDETERMINISTIC_RESET, (
                f"reset() after reset(seed={self.seed}) gave different observations in two runs: expected the "
                f"unseeded reset to continue the seeded RNG; the env builds a new one from seed=None (use "
                f"self.np_random, seeded by super().reset(seed=seed))"),
                {"seed": self.seed, "first": repr(u1[0])[:200], "second": repr(u2[0])[:200], "cause": "unseeded_reset"}))

    def _nondeterministic(self, first: Any, second: Any) -> None:
        """NONDETERMINISTIC_RESET, with the wrapper that keeps state where the env inside it is
        deterministic (an advisory for a running-statistics wrapper, a WARN for another)."""
        layer = stateful_layer(self.env, self._layer_reset, values_equal)
        ev = {"seed": self.seed, "first": repr(first)[:200], "second": repr(second)[:200]}
        if layer is None:
            self.rc.record(Finding(C.NONDETERMINISTIC_RESET,
                                   f"reset(seed={self.seed}) twice gave different observations: expected equal; "
                                   f"seed the env's RNG from reset's seed (super().reset(seed=seed), "
                                   f"self.np_random)", ev))
            return
        name = type(layer).__name__
        if keeps_state_by_design(layer):
            self.rc.record(Finding(C.NONDETERMINISTIC_RESET, (
                f"reset(seed={self.seed}) twice gave different observations, but the env inside the wrapper "
                f"{name} gives the same ones: {name} keeps state across resets by design (running statistics), "
                f"the env's RNG is seeded; runs with one seed differ by that state"),
                {**ev, "cause": "wrapper_state", "wrapper": name, "advisory": True}, status=C.PASS))
            return
        self.rc.record(Finding(C.NONDETERMINISTIC_RESET, (
            f"reset(seed={self.seed}) twice gave different observations, and the env inside the wrapper "
            f"{name} gives the same ones: expected {name}.reset to be deterministic under a seed; pass reset's "
            f"seed through (self.env.reset(seed=seed)) and seed any RNG of its own from it"),
            {**ev, "cause": "wrapper", "wrapper": name}))

    def _layer_reset(self, layer: Any) -> tuple[bool, Any]:
        """One layer of the env's wrapper chain reset with the check's seed, under the watch."""
        self.watch.enter("reset", self.rc.steps, self.rc.episodes)
        try:
            out = layer.reset(seed=self.seed)
        except Exception:   # noqa: BLE001 -- the layer cannot be compared; the env's own reset says the rest
            return False, None
        finally:
            self.watch.leave()
        return True, out[0] if isinstance(out, tuple) and out else out

    def _probe_resets(self) -> None:
        """After the judged run (its reset(seed) pair deterministic): reset(seed) again and replay
        the first episode's actions. A replay that leaves the first episode while attributes of
        the env kept values of earlier episodes is RESET_KEEPS_STATE (a step counter, a terminal
        flag, a previous observation that reset() does not restore). Then the unseeded resets
        after a seeded one. Nothing of it is judged otherwise."""
        if self.first_episode.steps:
            self._replay_first_episode()
        self._unseeded_after_seeded()

    def _replay_first_episode(self) -> None:
        got = self._layer_reset(self.env)
        if not got[0]:
            return
        now = snapshot(self.env)
        fe = self.first_episode

        def step(action: Any) -> Any:
            self.watch.enter("step", self.rc.steps, self.rc.episodes)
            try:
                return self.env.step(action)
            finally:
                self.watch.leave()

        where = divergence(fe, got[1], step, values_equal)
        kept = kept_fields(fe.attrs, now, values_equal)
        if where is None or not kept:
            return
        crashed = getattr(self, "first_step_streak", 0)
        why = (f"; the crashes at the first step of the last {crashed} episodes come from that state"
               if crashed else "")
        self.rc.record(Finding(C.RESET_KEEPS_STATE, (
            f"reset(seed={self.seed}) after {self.rc.episodes} episode(s) does not restore a fresh reset(seed="
            f"{self.seed}): replaying the first episode's actions, {where}; kept from earlier episodes: "
            f"{'; '.join(kept[:5])}; expected reset() to set every per-episode attribute again{why}"),
            {"seed": self.seed, "diverges": where, "kept": kept[:20], "episodes": self.rc.episodes,
             "first_step_crashes": crashed}))
