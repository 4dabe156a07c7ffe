"""The pure checks on hand-made arrays: thresholds, edge cases and no-false-alarm rates."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from flow1_ray import Thresholds
from flow1_ray.common import codes as C
from flow1_ray.checks.env.action_pipe import action_cast_error, check_action_batch
from flow1_ray.checks.env.env_spec import membership_error, step_time_findings
from flow1_ray.checks.env.obs_flow import reset_drift
from flow1_ray.checks.env.reward import Episodes, reward_findings, reward_stats
from flow1_ray.checks.learner.reward_drop import ReturnTracker
from flow1_ray.checks.env.space_contract import validate_space
from flow1_ray.checks.spaces import leaves

TH = Thresholds()


def codes(findings):
    return {f.code for f in findings}


def _swapped_box():
    box = spaces.Box(0.0, 1.0, (2,), np.float32)
    box.low[1], box.high[1] = 1.0, 0.0
    return box


def _dict_holding(obj):
    d = spaces.Dict({"a": spaces.Discrete(2)})
    d.spaces["b"] = obj  # written in after construction, which the constructor would refuse
    return d


def _text_with_lengths(lo, hi):
    t = spaces.Text(8)
    t.min_length, t.max_length = lo, hi
    return t


@pytest.mark.parametrize("space,role,fragment", [
    ("not a space", "obs", "expected a gymnasium.spaces.Space, actual str"),
    (_dict_holding(object()), "obs", "obs['b']: expected a gymnasium.spaces.Space, actual object"),
    (spaces.Box(-np.inf, np.inf, (1,), np.float32), "action", "expected finite action bounds"),
    (spaces.Sequence(_swapped_box()), "obs", "obs.feature_space Box"),
    (spaces.OneOf((spaces.Discrete(2), _swapped_box())), "obs", "obs.spaces[1] Box"),
    (spaces.Graph(_swapped_box(), None), "obs", "obs.node_space Box"),
    (_text_with_lengths(5, 2), "obs", "expected 0 <= min_length <= max_length, actual min_length 5, max_length 2"),
])
def test_space_invalid(space, role, fragment):
    (f,) = validate_space(space, role)
    assert f.code == C.SPACE_INVALID and fragment in f.message, f.message


def test_space_invalid_after_construction():
    d = spaces.Discrete(3)
    d.n = np.int64(0)
    box = spaces.Box(0.0, 1.0, (2,), np.float32)
    box.low[0] = np.nan
    assert "expected n > 0, actual n=0" in validate_space(d, "obs")[0].message
    assert "NaN bound" in validate_space(box, "obs")[0].message


def test_valid_spaces_pass_and_nest():
    sp = spaces.Dict({"a": spaces.Tuple((spaces.Discrete(2), spaces.MultiDiscrete([2, 3]))),
                      "b": spaces.Box(-np.inf, np.inf, (2,), np.float32)})
    assert validate_space(sp, "obs") == []
    assert [lf.path for lf in leaves(sp, "obs")] == ["obs['a'][0]", "obs['a'][1]", "obs['b']"]


class _Mission(spaces.Space):
    """Like MiniGrid's MissionSpace: a str space of a package's own."""

    def __init__(self):
        super().__init__(dtype=str)

    def contains(self, x):
        return x in ("get the key", "open the door")


@pytest.mark.parametrize("space", [
    spaces.Text(8), _Mission(), spaces.Sequence(spaces.Box(0, 1, (2,))), spaces.Sequence(spaces.Discrete(3), stack=True),
    spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3)), spaces.OneOf((spaces.Discrete(2), spaces.Text(4))),
    spaces.Dict({"image": spaces.Box(0, 255, (7, 7, 3), np.uint8), "mission": _Mission()}),
    spaces.Tuple((spaces.Text(3), spaces.Dict({"s": spaces.Sequence(spaces.Text(2))}))),
], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("role", ["obs", "action"])
def test_every_valid_gymnasium_space_is_accepted(space, role):
    assert validate_space(space, role) == []
    lvs = leaves(space, role)
    assert lvs and all(lf.opaque == (type(lf.space) not in (spaces.Box, spaces.Discrete)) for lf in lvs)


def test_membership_error_says_expected_and_actual():
    text = spaces.Text(max_length=4, charset="ab")
    assert membership_error("abba", text) is None
    expected, actual = membership_error("abcab", text)
    assert expected == "a value in Text(1, 4, charset=ab)"
    assert actual == "str 'abcab' (length 5 outside [1, 4]; characters not in the charset: 'c')"
    assert membership_error(3, text)[1] == "int 3"
    assert membership_error("fly", _Mission())[1] == "str 'fly'"


def test_reward_rules():
    rng = np.random.default_rng(0)
    assert codes(reward_findings(rng.normal(1, 0.1, 1000), TH)) == set()
    # Acrobot-like: -1 everywhere but one goal step: 0 is smaller than the usual magnitude
    acro = -np.ones(1000)
    acro[500] = 0.0
    assert codes(reward_findings(acro, TH)) == set()
    # one isolated large penalty among small steps: 10000x the usual magnitude, 91 % of the |reward|
    pen = np.full(1000, -0.1)
    pen[500] = -1000.0
    assert codes(reward_findings(pen, TH)) == {C.REWARD_SPIKES}
    # the same penalty every 97 steps is a level of the env, paid again and again: its design
    pen[::97] = -1000.0
    assert codes(reward_findings(pen, TH)) == set()
    sparse = np.zeros(1000)
    sparse[10] = 1.0
    (f,) = reward_findings(sparse, TH)
    assert f.code == C.REWARD_SPARSE and f.status == C.PASS and f.evidence["advisory"] is True
    assert f.message.startswith("advisory: non-zero reward ratio 0.0010")
    assert codes(reward_findings(np.zeros(1000), TH)) == {C.REWARD_SPARSE}  # not also REWARD_SCALE


def _points(n: int, p: float, values, rng) -> np.ndarray:
    """Mostly 0, a value from ``values`` with probability ``p`` per step."""
    r = np.zeros(n)
    hit = rng.random(n) < p
    r[hit] = rng.choice(values, hit.sum())
    return r


@pytest.mark.parametrize("seed", range(5))
def test_point_and_goal_rewards_are_not_spikes(seed):
    rng = np.random.default_rng(seed)
    pong = _points(5000, 0.025, [-1.0] * 9 + [1.0], rng)            # ALE: the opponent scores most points
    goal = _points(5000, 0.004, [1.0], rng)                         # reach-the-goal +1
    minigrid = _points(5000, 0.01, 1 - 0.9 * rng.integers(1, 250, 50) / 250, rng)  # 1 - 0.9 t/T
    locomotion = rng.laplace(0.5, 1.0, 5000)                        # dense, heavy-tailed (Hopper-like)
    for r in (pong, goal, minigrid, locomotion):
        assert C.REWARD_SPIKES not in codes(reward_findings(r, TH)), reward_stats(r)


def _episodes(lengths, terminated=True) -> Episodes:
    ends = np.cumsum(lengths)
    return Episodes(ends, np.full(ends.size, terminated))


@pytest.mark.parametrize("seed", range(5))
def test_designed_reward_levels_are_not_spikes(seed):
    """An env's own outsized values, however large: they recur, or they are the outcome an
    episode ends on (RLlib's SimpleCorridor, WheelBanditEnv, GuessTheNumberGame have them)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, 5001)
    collision = np.where(rng.random(5000) < 0.01, -100.0, -0.1)    # a collision penalty among -0.1 steps
    bonus = rng.normal(1, 0.1, 5000) + np.where(rng.random(5000) < 0.2, 50.0, 0.0)   # a bonus arm
    for r in (collision, bonus):
        assert C.REWARD_SPIKES not in codes(reward_findings(r, TH, steps, episodes=_episodes([50] * 100))), \
            reward_stats(r)
        assert C.REWARD_SPIKES not in codes(reward_findings(r, TH)), reward_stats(r)   # episodes unknown
    # a corridor: -0.01 a step, +1 on the step that reaches the goal, random walks of 20-400 steps
    lengths = rng.integers(20, 400, 30)
    corridor = np.full(int(lengths.sum()), -0.01)
    corridor[np.cumsum(lengths) - 1] = 1.0
    s = np.arange(1, corridor.size + 1)
    assert C.REWARD_SPIKES not in codes(reward_findings(corridor, TH, s, episodes=_episodes(lengths)))
    # a game won once in the whole run, for 100, at its end: an outcome, not a spike
    game = rng.normal(0, 0.5, 2000)
    game[999] = 100.0
    s = np.arange(1, 2001)
    st = reward_stats(game, 10.0, s, _episodes([100] * 20))
    assert st["isolated"] == 0 and st["levels"][0]["at_episode_end"] is True
    assert C.REWARD_SPIKES not in codes(reward_findings(game, TH, s, episodes=_episodes([100] * 20)))
    # ... but the same 100 mid-episode, once, is an isolated spike
    game[999], game[950] = 0.0, 100.0
    assert C.REWARD_SPIKES in codes(reward_findings(game, TH, s, episodes=_episodes([100] * 20)))


@pytest.mark.parametrize("seed", range(5))
def test_isolated_outsized_rewards_are_spikes(seed):
    rng = np.random.default_rng(seed)
    steps = np.arange(1, 5001)
    eps = _episodes([200] * 25)
    rare_penalty = _points(5000, 0.02, [1.0], rng)
    rare_penalty[2250] = -1000.0                                    # once, among rare +1 points
    dense = rng.normal(1, 0.1, 5000)
    dense[[1234, 3456]] = [1e4, -5e3]                               # twice, two values, two episodes
    for r in (rare_penalty, dense):
        for kw in ({}, {"episodes": eps}):
            (f,) = [f for f in reward_findings(r, TH, steps, **kw) if f.code == C.REWARD_SPIKES]
            assert f.status == C.WARN and f.evidence["isolated_mass"] > TH.reward_spike_mass, f.message
    (f,) = [f for f in reward_findings(dense, TH, steps, episodes=eps) if f.code == C.REWARD_SPIKES]
    assert f.message.startswith("2 isolated reward(s) in 2 episode(s) beyond 10x the usual magnitude 1")
    assert "largest 1e+04 at step 1235" in f.message and f.env_step == 1235


def test_spike_thresholds_move_the_verdict():
    r = np.full(1000, -0.1)
    r[500] = -200.0
    assert C.REWARD_SPIKES in codes(reward_findings(r, TH))
    assert C.REWARD_SPIKES not in codes(reward_findings(r, TH.with_overrides({"reward_spike_ratio": 2000.0})))
    assert C.REWARD_SPIKES not in codes(reward_findings(r, TH.with_overrides({"reward_spike_mass": 0.95})))
    assert C.REWARD_SPIKES not in codes(reward_findings(r, TH.with_overrides({"reward_level_min_recurrences": 1})))
    nan = np.ones(50)
    nan[7] = np.inf
    (f,) = reward_findings(nan, TH)
    assert f.code == C.REWARD_NAN and f.env_step == 7  # below reward_min_steps only NaN is judged


def test_return_drop_quiet_on_stationary_returns_and_fires_on_collapse():
    alarms = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        t = ReturnTracker(TH)
        for r in rng.geometric(1 / 22, 300):  # CartPole-like returns of a fixed policy
            t.add(float(r))
        alarms += t.check() is not None
    assert alarms <= 2, f"{alarms} false alarms in 200 stationary runs"
    t = ReturnTracker(TH)
    rng = np.random.default_rng(0)
    for i in range(60):
        t.add(float(200 + rng.normal(0, 10) if i < 40 else 60 + rng.normal(0, 10)))
    f = t.check()
    assert f is not None and f.code == C.REWARD_DROP and f.evidence["best"] > 150


def test_return_drop_handles_negative_returns():
    t = ReturnTracker(TH)
    for i in range(60):
        t.add(-100.0 - (0 if i < 30 else 200) + (i % 3))
    assert t.check() is not None


def test_reset_drift_false_alarm_rate_and_power():
    alarms = 0
    for seed in range(100):
        x = np.random.default_rng(seed).uniform(-0.05, 0.05, (45, 4))
        alarms += reset_drift(x, TH, seed=seed) is not None
    assert alarms <= 2
    x = np.random.default_rng(0).uniform(-0.05, 0.05, (45, 4))
    x[22:, 2] += 0.08
    f = reset_drift(x, TH)
    assert f is not None and f.evidence["dimension"] == 2 and f.evidence["p_value"] <= 0.01


def test_reset_drift_needs_enough_episodes():
    x = np.zeros((20, 2))
    x[10:] = 5.0
    assert reset_drift(x, TH) is None  # 10 per half < drift_min_episodes


def test_step_time_floor_and_ratio():
    rng = np.random.default_rng(0)
    base = rng.normal(20e-6, 2e-6, 1000)
    noisy = base.copy()
    noisy[::50] = 4e-3  # 2 % scheduler hiccups of 4 ms: ratio huge, but under both floors
    assert step_time_findings(noisy, TH) == []
    slow = base.copy()
    slow[::10] = 12e-3
    (f,) = step_time_findings(slow, TH)
    assert f.evidence["rule"] == "p95"
    stall = base.copy()
    stall[500] = 0.25
    (f,) = step_time_findings(stall, TH)
    assert f.evidence["rule"] == "max" and f.evidence["step"] == 500


def test_action_cast_error_cases():
    a = np.array([0.1, -0.2], np.float32)
    assert action_cast_error(a, a.copy()) is None
    assert action_cast_error(np.int64(1), 1) is None  # np.int64 -> int is harmless
    msg, ev = action_cast_error(a, a.astype(np.float64))
    assert "expected float32, actual float64" in msg
    msg, _ = action_cast_error({"m": a}, {"m": a * 2})
    assert msg.startswith("action['m']: values changed")
    msg, _ = action_cast_error(np.int64(1), 2)
    assert "expected 1, actual 2" in msg


def test_action_out_of_bounds_before_clipping():
    (leaf,) = leaves(spaces.Box(-1.0, 1.0, (2,), np.float32), "action")
    acts = np.zeros((100, 2), np.float32)
    acts[40:45, 1] = 1.5
    (f,) = check_action_batch(leaf, acts, np.arange(100))
    assert f.code == C.ACTION_OUT_OF_BOUNDS and f.env_step == 40 and f.count == 5


def test_thresholds_are_configurable_and_strict():
    th = TH.with_overrides({"reward_sparse_ratio": 0.5})
    assert th.reward_sparse_ratio == 0.5
    with pytest.raises(ValueError, match="unknown threshold"):
        TH.with_overrides({"no_such": 1})


def test_live_checks_need_repeated_stalls_and_spend_the_drift_alpha():
    """A live run is judged for hours: one GC pause is not a stall, and the reset-drift
    test spends its false-alarm rate over its looks (taken as the episodes double)."""
    from gymnasium import spaces

    from flow1_ray.checks.env.rollout import RolloutChecker

    rng = np.random.default_rng(0)
    stall = rng.normal(20e-6, 2e-6, 1000)
    stall[500] = 0.25
    assert step_time_findings(stall, TH, min_stalls=3) == []
    stall[[100, 700]] = 0.3
    (f,) = step_time_findings(stall, TH, min_stalls=3)
    assert f.evidence["stalls"] == 3
    rc = RolloutChecker(spaces.Box(-1, 1, (2,)), spaces.Discrete(2), TH, live=True)
    looks = []
    for i in range(200):
        rc.on_reset(rng.uniform(-0.05, 0.05, 2).astype(np.float32), {})
        before = rc._drift_looks
        rc.judge()
        if rc._drift_looks > before:
            looks.append(i + 1)
    assert looks == [32, 64, 128]  # at each doubling, not at every judge
    assert C.OBS_DISTRIBUTION_DRIFT not in {f.code for f in rc.log.findings()}


# --- NO_SAMPLES: iterations that train on nothing ------------------------------------------
def _no_samples_run(rule, steps, iter_s=2.0, sampled=None, dropped=None, runners=None):
    found = []
    for i, s in enumerate(steps, 1):
        result = {"num_env_steps_sampled_lifetime": s, "time_this_iter_s": iter_s,
                  "fault_tolerance": {"num_env_runners_dropped_lifetime": dropped[i - 1] if dropped else 0,
                                      "num_healthy_workers": 1}}
        if sampled is not None:
            result["env_runners"] = {"num_env_steps_sampled": sampled[i - 1]}
        found += rule.add(result, i, runners[i - 1] if runners else None)
    return found


def test_a_run_whose_runners_are_all_inside_their_first_sample_waits_for_the_liveness_watch():
    """APPO on a loaded machine: its runner waits ~40 s in its first sample() for RLlib's
    EnvRunnerStateServer to start (2 s iterations, none left out, no sample() returned): the
    start's grace is then first_call_s (the stall hold's limit), not sample_timeout_s; a
    runner that returned a call, or a call RLlib left out, brings back the short grace."""
    from flow1_ray.checks.run.sampling import NoSamples

    slow = _no_samples_run(NoSamples({"sample_timeout_s": 20}, first_call_s=150.0), [0] * 22 + [500])
    assert slow == []
    never = _no_samples_run(NoSamples({"sample_timeout_s": 20}, first_call_s=150.0), [0] * 80)
    assert [e.iteration for e in never] == [78], [e.iteration for e in never]
    assert "no EnvRunner has returned from a sample() call yet" in never[0].message
    returned = [{}] * 5 + [{"1": {"calls": 1, "late": 0}}] * 9
    early = _no_samples_run(NoSamples({"sample_timeout_s": 20}, first_call_s=150.0), [0] * 14, runners=returned)
    assert [e.iteration for e in early] == [13] and "no EnvRunner has returned" not in early[0].message
    dropped = _no_samples_run(NoSamples({"sample_timeout_s": 20}, first_call_s=150.0), [0] * 14,
                              dropped=list(range(14)))
    assert [e.iteration for e in dropped] == [13]


def test_a_runner_slow_to_give_its_first_steps_is_no_streak_until_rllib_would_call_it_late():
    """APPO with 2 s iterations whose runner's first steps arrive at iteration 6 (10 s, on a
    busy machine): five empty iterations, within sample_timeout_s=20, are the run's start;
    a runner that never samples is named once the iterations outlast the timeout."""
    from flow1_ray.checks.run.sampling import NoSamples

    assert _no_samples_run(NoSamples({"sample_timeout_s": 20}), [0, 0, 0, 0, 0, 500, 1000]) == []
    never = _no_samples_run(NoSamples({"sample_timeout_s": 20}), [0] * 14)
    # 2 s an iteration: past 20 s from iteration 11, the 3rd empty one after it is iteration 13
    assert [e.iteration for e in never] == [13] and "3 iterations in a row" in never[0].message
    # RLlib's default timeout (60 s) when the config does not say
    assert [e.iteration for e in _no_samples_run(NoSamples(), [0] * 40)] == [33]
    # steps sampled in the first iteration: the run has started, a stall right after is counted,
    # and named once it has lasted sample_timeout_s (2 s iterations: the 10th empty one)
    first = _no_samples_run(NoSamples({"sample_timeout_s": 20}), [500] * 14, sampled=[500] + [0] * 13)
    assert [e.iteration for e in first] == [11] and "10 iterations in a row" in first[0].message
    # a synchronous algorithm's empty iteration lasts the timeout itself: the 3rd is named
    sync = _no_samples_run(NoSamples({"sample_timeout_s": 20}), [500] * 4, iter_s=21.0, sampled=[500, 0, 0, 0])
    assert [e.iteration for e in sync] == [4]
    # IMPALA on a busy machine: 3 empty 2 s iterations, then steps again: no streak to name
    assert _no_samples_run(NoSamples({"sample_timeout_s": 20}), [500, 500, 500, 500, 900],
                           sampled=[500, 0, 0, 0, 400]) == []
    # a synchronous run whose only runner hangs from its start (sample_timeout_s 1 s): its
    # first three iterations sampled nothing, the first of them included
    hung = _no_samples_run(NoSamples({"sample_timeout_s": 1}), [0, 0, 0], iter_s=1.1)
    assert [e.iteration for e in hung] == [3] and "3 iterations in a row" in hung[0].message
    # a restored run: its first lifetime count is the checkpoint's, its own steps none yet
    restored = _no_samples_run(NoSamples({"sample_timeout_s": 20}), [10**6] * 6, sampled=[0] * 6)
    assert restored == []
