"""Small samples held and read together: an off-policy algorithm samples one step per call,
hundreds of calls a second, and flow1's reading of a sample (the scan, the state sampling, the
sends: :meth:`RunnerAgent._read <flow1_ray.runner.agent.RunnerAgent._read>`) costs about the
same for one step as for hundreds."""

from __future__ import annotations

from ..checks.env.episode_parts import episode_parts

HOLD_MAX_SAMPLE_STEPS = 64   # a sample() of fewer steps is held and read with the next ones...
HOLD_STEPS = 512             # ... until this many steps are held
HOLD_S = 0.2                 # ... or the first was held this long ago


class SampleHolding:
    """The holding of :class:`~flow1_ray.runner.agent.RunnerAgent` (its ``_held``,
    ``_held_steps``, ``_held_since`` and ``_read``)."""

    def _hold_or_read(self, samples: list, t0: float) -> float:
        """A small sample (an off-policy algorithm's one step per call) is held, a few
        attribute reads per episode, and read with the next ones: at most ``HOLD_STEPS`` steps
        or ``HOLD_S`` seconds later; a larger one is read at once, after what was held.
        Returns the judgements' time (counted with the checks')."""
        parts = episode_parts(samples)
        held = self._held
        if parts:
            steps = 0
            for p in parts:
                steps += p.n
            if steps < HOLD_MAX_SAMPLE_STEPS:
                if not held:
                    self._held_since = t0
                held.extend(parts)
                self._held_steps += steps
                if self._held_steps < HOLD_STEPS and t0 - self._held_since < HOLD_S:
                    return 0.0
                parts = []
        if held or parts or t0 - self._held_since >= HOLD_S:
            if held:
                parts = held + parts
                self._held, self._held_steps = [], 0
            self._held_since = t0
            return self._read(parts)
        return 0.0

    def flush(self) -> None:
        """Read what is held now (the runner stops)."""
        if self._held:
            parts, self._held, self._held_steps = self._held, [], 0
            self._read(parts)
