"""``flow1 diagnose``: a finished run's result file read as untrusted data.

``flow1 diagnose PATH`` reads a Tune/RLlib ``result.json`` (one JSON object per line; its
``config`` entry or a ``params.json`` beside it gives the knobs), so a run made without flow1
can be read too, and judges it with the live rules (:mod:`.checks.curve_diagnosis`).

A result file is data, never code: nothing it names is imported (its config's ``env`` may
be ``my_pkg.envs:Env`` or a registered id whose entry point imports a package); only an env
the user names (``--env``) is made, for its action space. A signal the rules need that is
absent or all NaN is listed as not assessable (:func:`not_assessable`), never silence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..checks.curves import result_number, result_section
from ..common.errors import Flow1InputError
from ..common.inputs import parse_input_json, read_input_text
from ..common.schema import ALL_MODULES, RESULT_KEY


def read_results(path: str | Path) -> tuple[list[dict], dict | None]:
    """A run's results and config from a ``result.json`` (or the directory holding it).
    Raises :class:`Flow1InputError` with one line on anything unreadable."""
    p = Path(path)
    if p.is_dir():
        candidates = [p / "result.json"] + sorted(p.glob("*/result.json"))
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise Flow1InputError(f"no result.json in {p}")
        p = found[0]
    text = read_input_text(p, "the results file")
    results = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        r = parse_input_json(line, f"{p}:{n} (expected one RLlib result object per line)")
        if not isinstance(r, dict):
            raise Flow1InputError(f"{p}:{n}: expected a JSON object, actual {type(r).__name__}")
        results.append(r)
    if not results:
        raise Flow1InputError(f"{p} holds no results")
    if not any(isinstance(r.get("learners"), dict) or any(k.startswith("learners/") for k in r) for r in results):
        raise Flow1InputError(f"{p}: no 'learners' entries; expected RLlib results of the new API stack")
    config = results[0].get("config") if isinstance(results[0].get("config"), dict) else None
    params = p.parent / "params.json"
    if config is None and params.is_file():
        try:
            loaded = parse_input_json(read_input_text(params, "params.json"), str(params))
            config = loaded if isinstance(loaded, dict) else None
        except Flow1InputError:   # the knobs are a bonus: without them the advice names no values
            config = None
    return results, config


#: the run-level signal the rules read: label -> path in a result
RUN_SIGNALS = {"episode return (env_runners/episode_return_mean)": ("env_runners", "episode_return_mean")}
#: each RLModule's signals, by the kind of learner: label -> the learner stats names that carry it
LR = ("default_optimizer_learning_rate", "curr_lr", "qf_learning_rate")
POLICY_SIGNALS = {"entropy": ("entropy",), "KL": ("mean_kl_loss",), "policy loss": ("policy_loss",),
                  "value loss": ("vf_loss",), "learning rate": LR}
Q_SIGNALS = {"Q values": ("qf_mean", "qf_max", "qf_min"), "TD error": ("td_error_mean",), "learning rate": LR}
SAC_SIGNALS = {**Q_SIGNALS, "alpha": ("alpha_value",), "policy entropy (logps)": ("logps",),
               "target entropy": ("target_entropy",)}
#: the rules that read what only flow1's learner tracing measures (Flow1Callbacks)
TRACED = ("per-layer gradients and dormant units (GRADIENT_ZERO, GRADIENT_VANISHING, GRADIENT_EXPLODING, "
          "DORMANT_UNITS, VALUE_DOMINATES) and PPO's clip fraction (CLIP_FRACTION): not assessable without "
          "Flow1Callbacks (they trace the Learner)")
REPLAY_UNMEASURED = ("the replay buffer's memory (REPLAY_MEMORY): not assessable without Flow1Callbacks (they measure "
                     "the buffer's bytes per step in the driver, where it lives); its fill, capacity and replay ratio "
                     "are read from result['replay_buffer']")
TRACED_Q = ("the Q range from the rewards (Q_DIVERGENCE): not assessable without Flow1Callbacks; bounded "
            "instead by the episodes' returns, which is looser")


def _kind(stats_seen: set[str]) -> tuple[str, dict]:
    """The learner's kind by the stats it reports: SAC (a temperature), Q-learning (Q-values)
    or a policy-gradient learner (PPO, APPO, IMPALA)."""
    if "alpha_value" in stats_seen or "logps" in stats_seen:
        return "SAC", SAC_SIGNALS
    if stats_seen & {"qf_mean", "qf_max", "qf_min"}:
        return "Q-learning", Q_SIGNALS
    return "policy gradient", POLICY_SIGNALS


def not_assessable(results: list[Mapping], action_space: Any = None) -> tuple[list[str], bool]:
    """What the curve rules cannot judge in these results -- each signal its learner's kind
    reports absent or never a finite number, per RLModule; the entropy maximum without an
    action space; what needs flow1's learner tracing -- and whether anything at all can be
    judged (False: every signal absent or NaN)."""
    from ..checks.curves import finite

    out: list[str] = []
    judged = False
    for label, path in RUN_SIGNALS.items():
        if any(result_number(r, *path) is not None for r in results):
            judged = True
        else:
            out.append(f"{label}: absent or never a finite number")
    finite_stats: dict[str, set[str]] = {}
    traced = False
    for r in results:
        for mid, stats in result_section(r, "learners").items():
            if mid == ALL_MODULES or not isinstance(stats, Mapping):
                continue
            seen = finite_stats.setdefault(str(mid), set())
            seen.update(k for k, v in stats.items() if finite(v) is not None)
            tr = stats.get(RESULT_KEY)
            traced = traced or (isinstance(tr, Mapping) and (finite(tr.get("traces")) or 0) > 0)
    if not finite_stats:
        out.append("learner numbers (learners/<module>/...): absent")
    kinds = set()
    for mid, seen in sorted(finite_stats.items()):
        kind, signals = _kind(seen)
        kinds.add(kind)
        missing = [label for label, names in signals.items() if not seen & set(names)]
        judged = judged or len(missing) < len(signals)
        if len(missing) == len(signals):
            out.append(f"module {mid} ({kind}): no learner number is ever finite")
        elif missing:
            out.append(f"module {mid} ({kind}): {', '.join(missing)} absent or never finite")
    if finite_stats and not traced:
        out.append(TRACED)
        if kinds & {"SAC", "Q-learning"}:
            out.append(TRACED_Q)
    if any(result_section(r, "replay_buffer") for r in results) and not any(
            result_section(result_section(r, RESULT_KEY), "replay") for r in results):
        out.append(REPLAY_UNMEASURED)
    if action_space is None and judged and "policy gradient" in kinds:
        out.append("entropy / max entropy: no action space (name the env with --env); ENTROPY_COLLAPSE not judged")
    return out, judged


def action_space_of(env_id: str, required: bool = False) -> Any:
    """The action space of a registered gymnasium env (made and closed at once); None when
    it cannot be made, unless ``required`` (the user named it): then a clear error. Only
    for an env id the user gave: making an env may import the module its id names."""
    import gymnasium as gym

    try:
        env = gym.make(env_id)
    except Exception as e:
        if required:
            raise Flow1InputError(f"cannot make env {env_id!r} for its action space: {type(e).__name__}: {e}") from None
        return None
    try:
        return env.action_space
    finally:
        try:
            env.close()
        except Exception:
            pass


