"""REWARD_UNEARNED: the reward rises because the env changes its own state, not the policy.

Seed 000 section 4.1, the "false success" trap: every surface check is green and the
reward curve climbs, because ``step()`` moves its target next to the agent every N steps,
resets a counter or otherwise changes its own state before it computes the reward. The
seed's remedy: watch which attributes of the env change inside ``step()`` and whether the
reward's jumps coincide with changes that no action caused.

:class:`RewardLogicAudit` does that on a stream of steps of one env (``flow1 check
--audit-reward``, or one sub-env of one EnvRunner in a training run):

1. *What changes inside step()*: the numbers inside ``env.unwrapped`` (its attributes and
   what they hold: objects, inner envs, containers; :class:`AttributeReader`) are read after
   every reset and step. Per attribute, each step's change (the difference of a number,
   "changed" for an array) has a usual value: +1 for a step counter, none for a target that
   stays put. An *event* is a step whose change is not the usual one -- the target moved,
   the counter was reset -- provided the usual change covers at least
   ``AUDIT_USUAL_SHARE`` of the steps (state that changes differently at every step, a
   position or a velocity, has no events).
2. *Whether the reward jumps with them*: the reward's step-to-step change at an event (the
   same step: the reward was computed after the change; or the next one: before it) beyond
   the 99th percentile of its change at every other step, for most events and in one
   direction, and unlikely by chance (binomial tail at 1 % per event < ``AUDIT_P_VALUE``).
   Steps that end an episode are no events (a goal's reward ends it by design).
3. *Whether an action caused them*: once an attribute looks like that, a copy of the env
   (:class:`EnvCopier`, taken before a step) is stepped with a different action: an event
   that happens in the copy too happened whatever the action. An env that cannot be copied
   is judged by its schedule instead: events at a constant period are a timer. A copy whose
   step changes the env itself (a shared simulator handle) voids the tries.

A FAIL needs the copies (an event no action prevented, in at least
``AUDIT_MIN_COUNTERFACTUALS`` tries); a period alone is a WARN; a reward that jumps *down*: an
advisory. An audit that read nothing that moved, or too few steps, says so (WATCHER_OFF: never
a PASS). Everything is bounded: the snapshot, the steps kept, the copies (by size, not time).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...common import codes as C
from ..findings import Finding, advisory
from ..own.watchers import watcher_off_finding
from ..rule import Rule
from .attributes import AUDIT_MAX_LEAVES, AUDIT_MAX_VISITS, AttributeReader, change, diff_lines, moved, skipped_text
from .env_copy import EnvCopier, other_action

AUDIT_MAX_STEPS = 20_000          # steps kept (a live audit keeps the newest)
AUDIT_USUAL_SHARE = 0.75          # the usual change covers at least this share of the steps
AUDIT_MAX_EVENT_SHARE = 0.25      # events are at most this share of the steps
AUDIT_MIN_EVENTS = 3
AUDIT_JUMP_QUANTILE = 0.99        # an event's reward change beyond this quantile of the others'
AUDIT_P_VALUE = 1e-4              # binomial tail of that many beyond-quantile events
AUDIT_MIN_SHARE = 0.5             # ... which are at least this share of the events
AUDIT_DIRECTION_SHARE = 0.8       # ... and go this much one way
AUDIT_MIN_BACKGROUND = 100        # reward changes at non-event steps needed for the quantile
AUDIT_MIN_COUNTERFACTUALS = 3     # copies stepped with another action, per attribute
AUDIT_MIN_STEPS = 200             # fewer steps read: too few to judge (said, never a PASS)
AUDIT_JUDGE_EVERY = 64
AUDIT_WATCHER = "the reward-logic audit"            # steps between looks for candidate attributes
PERIOD_SHARE = 0.8                # events at a period: this share of the gaps equal

RULES = (
    Rule("REWARD_UNEARNED", C.REWARD_LOGIC, C.FAIL,
         f"an attribute of the env changes inside step() at steps where it usually does not (or not so), on at "
         f"least {AUDIT_MIN_EVENTS} steps, not the last of an episode; the reward's change at those steps (or the "
         f"next) is beyond the {AUDIT_JUMP_QUANTILE:.0%} quantile of the other steps' for at least "
         f"{AUDIT_MIN_SHARE:.0%} of them, {AUDIT_DIRECTION_SHARE:.0%} upwards (binomial p < {AUDIT_P_VALUE:g}); and "
         f"the change happened whatever the action (a copy of the env stepped with another action changed it "
         f"too, in at least {AUDIT_MIN_COUNTERFACTUALS} tries: FAIL; events at a constant period when the env "
         f"cannot be copied: WARN; the reward jumps down: advisory)",
         evidence=("attribute", "events", "steps", "period", "counterfactual", "reward_jump", "lag", "diff")),
)


# --- the audit ------------------------------------------------------------------------------


@dataclass
class _Attr:
    """One attribute's per-step changes (the kept steps), its counterfactual tries and one diff."""

    changes: dict[int, Any] = field(default_factory=dict)   # step -> change
    independent: int = 0         # copies in which the event happened with another action
    dependent: int = 0           # copies in which it did not
    example: tuple[int, list[str]] | None = None


class RewardLogicAudit:
    """The audit of one env's steps (module docstring). Feed :meth:`on_reset` after each
    reset, :meth:`before_step` before each step (it takes the copy when one is wanted; a
    live runner calls it right after :meth:`after_step`, which is the same moment) and
    :meth:`after_step` after it; :meth:`findings` at the end. A value that cannot be read is
    skipped and named; the callers guard the rest (FLOW1_INTERNAL and the audit off)."""

    def __init__(self, action_space: Any, max_steps: int = AUDIT_MAX_STEPS,
                 judge_every: int = AUDIT_JUDGE_EVERY) -> None:
        self.action_space = action_space
        self.max_steps = max_steps
        self.judge_every = judge_every
        self.steps = 0
        self._last: dict[str, Any] | None = None
        self._rewards: dict[int, float] = {}
        self._episode: dict[int, int] = {}
        self._ep_step: dict[int, int] = {}     # step -> its index in its episode (from 1)
        self._ep_steps: int | None = None
        self._ended: set[int] = set()
        self._attrs: dict[str, _Attr] = {}
        self._episodes = 0
        self._candidates: set[str] = set()
        self._moving: set[str] = set()         # attributes seen changing inside a step
        self._copy: Any = None
        self.reader = AttributeReader()
        self.copier = EnvCopier()
        #: told what the audit is about to do to the env ("read", "copy", "try": step a copy),
        #: so that whoever watches the drive can tell the audit's hang or crash from the env's
        self.phase: Callable[[str], None] = lambda what: None

    # -- the stream --------------------------------------------------------------------
    def on_reset(self, env: Any) -> None:
        self._episodes += 1
        self._ep_steps = 0
        self.phase("read")
        self._last = self.reader.snapshot(env, discover=True)
        self._copy = None

    def before_step(self, env: Any) -> None:
        """Copy the env when a candidate attribute still needs counterfactual tries."""
        self._copy = None
        if self._wants_copy():
            self.phase("copy")
            self._copy = self.copier.take(env)

    def after_step(self, env: Any, action: Any, reward: Any, ended: bool) -> None:
        """One step: its attribute changes, its reward, and the counterfactual of a copy."""
        t = self.steps = self.steps + 1
        self.phase("read")
        now = self.reader.snapshot(env)
        before = self._last
        self._last = now
        try:
            self._rewards[t] = float(reward)
        except (TypeError, ValueError):
            self._rewards[t] = float("nan")
        self._episode[t] = self._episodes
        self._ep_step[t] = self._ep_steps = 1 if before is None or self._ep_steps is None else self._ep_steps + 1
        if ended:
            self._ended.add(t)
        if before is not None:
            for k in now.keys() & before.keys():
                a = self._attrs.get(k)
                if a is None:
                    if len(self._attrs) >= AUDIT_MAX_LEAVES:
                        continue
                    a = self._attrs[k] = _Attr()
                ch = change(before[k], now[k])
                a.changes[t] = ch
                if ch not in ("same", 0.0):
                    self._moving.add(k)
                if a.example is None and k in self._candidates and ch != self._usual(a)[0]:
                    a.example = (t, diff_lines(before, now))
            if self._copy is not None and not ended:
                self._counterfactual(action, before, now)
                self.phase("read")
                if moved(now, self.reader.snapshot(env)):   # the copy shares the env's state: no more copies
                    self.copier.void("stepping a copy of the env changed the env itself (the copy shares its "
                                     "state, a simulator handle): its counterfactual tries are void")
                    for a in self._attrs.values():
                        a.independent = a.dependent = 0
        self._copy = None
        if t > self.max_steps:
            self._forget(t - self.max_steps)
        if t % self.judge_every == 0:
            self._candidates = {k for k, *_ in self._suspects()}

    def _forget(self, t: int) -> None:
        self._rewards.pop(t, None)
        self._episode.pop(t, None)
        self._ep_step.pop(t, None)
        self._ended.discard(t)
        for a in self._attrs.values():
            a.changes.pop(t, None)

    # -- counterfactuals ------------------------------------------------------------------
    def _wants_copy(self) -> bool:
        if not self._candidates or not self.copier.able:
            return False
        return any(self._attrs[k].independent + self._attrs[k].dependent < AUDIT_MIN_COUNTERFACTUALS
                   for k in self._candidates if k in self._attrs)

    def _counterfactual(self, action: Any, before: dict[str, Any], now: dict[str, Any]) -> None:
        """The step's candidates that had an event: did the copy, stepped with another action,
        have it too?"""
        usual = {k: self._usual(self._attrs[k])[0] for k in self._candidates if k in self._attrs}
        events = [k for k, u in usual.items() if k in now and k in before and change(before[k], now[k]) != u]
        if not events:
            return
        alt = other_action(self._copy, self.action_space, action)
        if alt is None:
            return
        try:   # the class's own step: an instance-level wrapper (flow1's probe) would step the original env
            self.phase("try")
            type(self._copy).step(self._copy, alt)
            self.phase("read")
            alt_now = self.reader.snapshot(self._copy)
        except Exception:
            return
        for k in events:
            if k not in alt_now:
                continue
            a = self._attrs[k]
            if change(before[k], alt_now[k]) != usual[k]:
                a.independent += 1
            else:
                a.dependent += 1

    # -- judging ----------------------------------------------------------------------------
    @staticmethod
    def _usual(a: _Attr) -> tuple[Any, float]:
        counts = Counter(a.changes.values())
        if not counts:
            return "same", 0.0
        change, n = counts.most_common(1)[0]
        return change, n / len(a.changes)

    def _events(self, a: _Attr) -> list[int] | None:
        usual, share = self._usual(a)
        if share < AUDIT_USUAL_SHARE:
            return None
        ev = [t for t, ch in a.changes.items() if ch != usual and t not in self._ended]
        if len(ev) < AUDIT_MIN_EVENTS or len(ev) > AUDIT_MAX_EVENT_SHARE * len(a.changes):
            return None
        return sorted(ev)

    def _jumps(self, steps: list[int], lag: int) -> np.ndarray:
        """The reward's change into each step + lag, within its episode (NaN where none)."""
        out = []
        for t in steps:
            u = t + lag
            if u - 1 in self._rewards and u in self._rewards and self._episode.get(u) == self._episode.get(u - 1) \
                    and self._episode.get(u) == self._episode.get(t) and (lag == 0 or t not in self._ended):
                out.append(self._rewards[u] - self._rewards[u - 1])
            else:
                out.append(float("nan"))
        return np.asarray(out, dtype=np.float64)

    def _suspects(self) -> list[tuple[str, list[int], dict]]:
        """(attribute, events, how the reward jumps) for every attribute whose events the
        reward's jumps line up with."""
        out = []
        all_steps = sorted(self._rewards)
        for k, a in self._attrs.items():
            ev = self._events(a)
            if ev is None:
                continue
            best = None
            for lag in (0, 1):
                hit = set(ev) | {t + 1 for t in ev} | {t - 1 for t in ev}
                bg = self._jumps([t for t in all_steps if t not in hit], 0)
                bg = np.abs(bg[np.isfinite(bg)])
                if bg.size < AUDIT_MIN_BACKGROUND:
                    continue
                q = float(np.quantile(bg, AUDIT_JUMP_QUANTILE))
                j = self._jumps(ev, lag)
                j = j[np.isfinite(j)]
                if j.size < AUDIT_MIN_EVENTS:
                    continue
                big = j[np.abs(j) > q]
                p = _binom_tail(big.size, j.size, 1.0 - AUDIT_JUMP_QUANTILE)
                if big.size < AUDIT_MIN_SHARE * j.size or p >= AUDIT_P_VALUE:
                    continue
                up = float(np.mean(big > 0))
                if max(up, 1.0 - up) < AUDIT_DIRECTION_SHARE:
                    continue
                stats = {"lag": lag, "p_value": p, "beyond": int(big.size), "judged": int(j.size),
                         "jump_median": float(np.median(big)), "background_q99": q, "up": up >= 0.5}
                if best is None or p < best["p_value"]:
                    best = stats
            if best is not None:
                out.append((k, ev, best))
        return out

    def findings(self, final: bool = True) -> tuple[list[Finding], dict]:
        """(REWARD_UNEARNED findings, what the audit read). ``final=False`` (a live look with
        steps still to come): an attribute whose counterfactual tries are still being taken
        is not yet judged, so that a WARN from its period alone never comes before the FAIL
        its copies establish (the verdict would depend on when the look falls)."""
        found: list[Finding] = []
        suspects = self._suspects()
        for k, ev, j in suspects:
            a = self._attrs[k]
            period = _period(ev, self._episode, self._ep_step)
            tries = a.independent + a.dependent
            if tries >= AUDIT_MIN_COUNTERFACTUALS:
                if a.independent <= a.dependent:
                    continue    # the action prevents it: the agent earns the change
                status, how = C.FAIL, (f"a copy of the env stepped with another action changed it too "
                                       f"({a.independent} of {tries} tries)")
            elif period is not None and (final or not self.copier.able):
                status, how = C.WARN, f"every {period} steps, a timer" + (
                    f" (no copy to test the action: {self.copier.error})" if self.copier.error else "")
            else:
                continue    # not established that no action caused it: say nothing
            found.append(self._finding(k, ev, j, period, how, status, a))
        blind = "" if found else self._blind(final)
        if blind:
            found.append(watcher_off_finding(AUDIT_WATCHER, "a reward the env pays for a change it made itself", blind,
                                             "", "REWARD_UNEARNED is not judged on this env"))
        return found, {"reward_audit": self._summary(len(suspects))}

    def _finding(self, k: str, ev: list[int], j: dict, period: int | None, how: str, status: str,
                 a: _Attr) -> Finding:
        when = "the same step: the reward is computed after the change" if j["lag"] == 0 else \
            "the next step: the change comes after that step's reward"
        diff = a.example[1] if a.example else []
        ev_text = {"attribute": k, "events": len(ev), "steps": len(a.changes), "first_events": ev[:8],
                   "period": period, "counterfactual": {"independent": a.independent, "dependent": a.dependent},
                   "reward_jump": round(j["jump_median"], 6), "background_q99": round(j["background_q99"], 6),
                   "beyond": j["beyond"], "judged": j["judged"], "p_value": j["p_value"], "lag": j["lag"],
                   "diff": "\n".join(diff), "diff_step": a.example[0] if a.example else None,
                   "skipped": dict(self.reader.skipped)}
        own = [ln[2:] for ln in diff if ln[2:].startswith(f"{k} = ")]
        example = (f"; at step {a.example[0]}: {own[0]} -> {own[1].split(' = ', 1)[1]}"
                   if a.example and len(own) == 2 else "")
        head = (f"env attribute {k} changes inside step() on {len(ev)} of {len(a.changes)} steps where it usually "
                f"does not ({how}), and the reward jumps {'up' if j['up'] else 'down'} by a median "
                f"{j['jump_median']:+.4g} at {j['beyond']} of {j['judged']} of them ({when}) where other steps "
                f"change by at most {j['background_q99']:.4g}{example}")
        if not j["up"]:
            return advisory(C.REWARD_UNEARNED, head + ": a penalty that no action caused", ev_text)
        tail = (f": the reward rises because the env changes {k}, not because the policy improved; "
                f"compute the reward from the state the action produced, before moving targets or resetting counters")
        return Finding(C.REWARD_UNEARNED, head + tail, ev_text, status=status)

    def _blind(self, final: bool) -> str:
        """Why the audit could not judge this env ("" when it could): it stopped reading, read
        nothing, read nothing that moved, or read too few steps (said only at the end)."""
        r = self.reader
        if r.off:
            return r.off
        if not final and self.steps < AUDIT_MIN_STEPS:
            return ""
        skipped = skipped_text(r.skipped)
        if not self._attrs:
            return f"it read no numbers in the env's attributes on {self.steps} steps{skipped}"
        if not self._moving:
            return (f"none of the {len(self._attrs)} numbers it read in the env's attributes changed inside step() "
                    f"on {self.steps} steps: the env keeps its state where the audit cannot read it (a simulator's "
                    f"memory, a C extension){skipped}")
        if final and self.steps < AUDIT_MIN_STEPS:
            return f"it read {self.steps} steps, fewer than the {AUDIT_MIN_STEPS} it needs to judge"
        return ""

    def _summary(self, suspects: int) -> str:
        s = f"{len(self._attrs)} env attributes read on {self.steps} steps"
        if suspects:
            s += f"; {suspects} with reward jumps at their changes"
        if self.reader.truncated:   # a discovery stopped at the visit budget
            s += f"; only the first {AUDIT_MAX_VISITS:,} values of the env's attributes are read"
        if self.reader.skipped:
            s += f"; skipped{skipped_text(self.reader.skipped)}"
        cp = self.copier
        if cp.copies:
            s += f"; {cp.copies} copies of the env for counterfactual steps ({cp.seconds:.2f} s)"
        if cp.error:
            s += f"; {cp.error}"
        return s


def _period(steps: list[int], episode: dict[int, int], ep_step: dict[int, int]) -> int | None:
    """The events' period: the constant gap between events (in the run's steps, or within
    an episode), when at least ``PERIOD_SHARE`` of the gaps have it; or the common divisor
    of their places in their episodes (a timer on the episode's step count)."""
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    inside = [b - a for a, b in zip(steps, steps[1:]) if episode.get(a) == episode.get(b)]
    for g in (gaps, inside):
        if len(g) >= AUDIT_MIN_EVENTS - 1:
            gap, n = Counter(g).most_common(1)[0]
            if gap > 1 and n >= PERIOD_SHARE * len(g):
                return int(gap)
    places = [ep_step[t] for t in steps if t in ep_step]
    if len(places) >= AUDIT_MIN_EVENTS:
        first = min(places)
        if first > 1 and sum(p % first == 0 for p in places) >= PERIOD_SHARE * len(places):
            return int(first)
    return None


def _binom_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (no scipy: its import is a second)."""
    if k <= 0:
        return 1.0
    lp, lq, ln = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    return min(1.0, sum(math.exp(ln - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
                        for i in range(k, n + 1)))
