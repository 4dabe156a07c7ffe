"""Every zoo fault is found with its code; the clean envs raise no false alarm."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

import zoo
from advisories import CLEAN_ENV_ADVISORIES, env_advisories
from flow1_ray import check_env
from flow1_ray.common import codes as C

# (env, code, status, a fragment of the message): SB3-style "expected X, actual Y".
FAULTS = [
    (zoo.DtypeTurnsFloat64, C.OBS_DTYPE_MISMATCH, C.FAIL, "expected float32, actual float64 (first at step 6)"),
    (zoo.ShapeChangesInEpisode10, C.OBS_SHAPE_MISMATCH, C.FAIL, "expected (3,), actual (4,)"),
    (zoo.DictLeafTurnsInt64, C.OBS_DTYPE_MISMATCH, C.FAIL, "obs['flags'] dtype: expected int8, actual int64"),
    (zoo.RewardArray, C.REWARD_NOT_SCALAR, C.FAIL, "actual ndarray float64 (1,)"),
    (zoo.TerminatedInt, C.DONE_NOT_BOOL, C.FAIL, "terminated: expected bool or np.bool_, actual int"),
    (zoo.InfoReused, C.INFO_MUTATION_DETECTED, C.WARN, "the same info dict object was returned"),
    (zoo.InfoEditedLater, C.INFO_MUTATION_DETECTED, C.WARN, "was modified by the env"),
    (zoo.InfoNotDict, C.INFO_NOT_DICT, C.FAIL, "info: expected dict, actual NoneType (first at step 3)"),
    (zoo.ObsAliased, C.OBS_ALIASED, C.WARN, "modified in place"),
    (zoo.ResetIgnoresSeed, C.NONDETERMINISTIC_RESET, C.WARN, "reset(seed=0) twice gave different observations"),
    (zoo.NeverEnds, C.EPISODE_NEVER_ENDS, C.WARN, "no terminated/truncated in 20000 steps (the 1000-step budget"),
    (zoo.CrashInEpisode3, C.ENV_CRASHED, C.FAIL, "step() raised FloatingPointError: integrator diverged"),
    (zoo.BadObsBounds, C.SPACE_INVALID, C.FAIL, "expected low <= high, actual low 10.0 > high -10.0 at index 1"),
    (zoo.UnboundedActions, C.SPACE_INVALID, C.FAIL, "expected finite action bounds"),
    (zoo.OldGymApi, C.GYM_ALIASED, C.FAIL, "step() returned a 4-tuple"),
    (zoo.TextLeafOutsideCharset, C.OBS_OUT_OF_BOUNDS, C.WARN,
     "obs['note'] not in its space: expected a value in Text(1, 8, charset= abcdefghijklmnopqrstuvwxyz), actual "
     "str 'go north!' (length 9 outside [1, 8]; characters not in the charset: '!') (first at step 25)"),
    (zoo.NanObsAtStep40, C.OBS_NAN_INF, C.FAIL, "1 NaN and 0 inf value(s) at step 40"),
    (zoo.NanAfterBudget, C.OBS_NAN_INF, C.FAIL, "1 NaN and 0 inf value(s) at step 1500"),
    (zoo.LeavesBoundsLate, C.OBS_OUT_OF_BOUNDS, C.WARN, "actual excess 2"),
    (zoo.ResetDrifts, C.OBS_DISTRIBUTION_DRIFT, C.WARN, "reset observations drift"),
    (zoo.TimestampObservation, C.PRECISION_LOSS, C.WARN, "of the step-to-step change"),
    (zoo.OverflowObservation, C.PRECISION_LOSS, C.WARN, "relative error inf"),
    (zoo.NanRewardAtStep23, C.REWARD_NAN, C.FAIL, "reward nan at step 23"),
    (zoo.RarePenaltySpike, C.REWARD_SPIKES, C.WARN, "2 isolated reward(s) in 2 episode(s) beyond 10x the usual "
                                                    "magnitude 1 (median |r| of non-zero rewards; largest -1000 at "
                                                    "step 250)"),
    (zoo.IsolatedBonus, C.REWARD_SPIKES, C.WARN, "1 isolated reward(s) in 1 episode(s) beyond 10x the usual "
                                                 "magnitude 0.997"),
    (zoo.RandomBonusLevel, C.REWARD_SPIKES, C.WARN, "of the |reward|, and nothing the step shows predicts it"),
    (zoo.TinyReward, C.REWARD_SCALE, C.WARN, "expected >= 0.001"),
    (zoo.RewardDecaysAcrossEpisodes, C.REWARD_DROP, C.WARN, "episode return mean of the last 10 episodes"),
    (zoo.cast_actions_env, C.ACTION_CAST_WARNING, C.WARN, "dtype changed on the way to env.step: expected float32, "
                                                           "actual float64"),
]


@pytest.mark.parametrize("env,code,status,fragment", FAULTS, ids=[f[0].__name__ for f in FAULTS])
def test_fault_is_detected(env, code, status, fragment):
    report = check_env(env, steps=1000, seed=0)
    hits = [e for e in report.events if e.code == code]
    assert hits, f"{code} not raised; got {sorted(report.codes())}"
    assert hits[0].status == status
    assert any(fragment in e.message for e in hits), [e.message for e in hits]
    assert report.status in (C.WARN, C.FAIL)
    ev = hits[0].evidence
    assert ev, "every finding carries evidence"


def test_step_time_outlier_every_tenth_step():
    report = check_env(zoo.SlowEveryTenth, steps=300, seed=0)
    (hit,) = [e for e in report.events if e.code == C.STEP_DURATION_OUTLIER]
    assert hit.evidence["rule"] == "p95" and hit.evidence["p95_ms"] > 5 and hit.evidence["floor_ms"] == 5.0


def test_faults_after_the_first_step_escape_gymnasiums_checker():
    """The zoo's late faults pass gymnasium's own check_env: the gap flow1 fills."""
    from gymnasium.utils.env_checker import check_env as gym_check_env

    import warnings
    missed = 0
    for env_cls in (zoo.NanRewardAtStep23, zoo.NanObsAtStep40, zoo.ShapeChangesInEpisode10, zoo.InfoReused):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                gym_check_env(env_cls(), skip_render_check=True)
                missed += 1
            except Exception:
                pass
        assert check_env(env_cls).status != C.PASS
    assert missed == 4


def test_crash_carries_exception_frame_and_traceback_and_goes_on():
    report = check_env(zoo.CrashInEpisode3, steps=1000)
    (hit,) = [e for e in report.events if e.code == C.ENV_CRASHED]
    assert hit.evidence["exception"] == "FloatingPointError"
    assert "_integrate" in hit.evidence["frame"]
    assert "integrator diverged" in hit.evidence["traceback_tail"]
    assert report.summary["steps"] >= 990  # the check went on after the crash


def test_gym_import_aliased_to_gymnasium(monkeypatch):
    monkeypatch.setitem(sys.modules, "gym", gym)
    report = check_env("CartPole-v1", steps=50)
    (hit,) = [e for e in report.events if e.code == C.GYM_ALIASED]
    assert hit.status == C.FAIL and "`import gym` resolves to gymnasium" in hit.message


CLEAN = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCarContinuous-v0", zoo.CleanNestedDict, zoo.CleanImage,
         zoo.Base, zoo.TextObservation, zoo.CleanDictWithText, zoo.CleanExoticSpaces, zoo.LongEpisodes,
         zoo.AtariLikeReward, zoo.CollisionPenalty, zoo.ActionBonusLevel]


@pytest.mark.parametrize("env", CLEAN, ids=lambda e: e if isinstance(e, str) else e.__name__)
@pytest.mark.parametrize("seed", [0, 1])
def test_clean_env_has_no_false_alarm(env, seed):
    report = check_env(env, steps=1000, seed=seed)
    assert report.codes(C.WARN) == set(), [e.log_line() for e in report.events if e.status != C.PASS]
    assert env_advisories(report) <= CLEAN_ENV_ADVISORIES, [e.log_line() for e in report.advisories()]
    assert report.summary["episodes"] >= 1


#: (env, code, a fragment of the message): advisories, not faults.
ADVISORY_CASES = [
    (zoo.SparseReward, C.REWARD_SPARSE, "non-zero reward ratio 0.0020 under random actions (2 of 1000 steps), "
                                        "below 0.01"),
    (zoo.CleanImage, C.OBS_UNNORMALIZED_IMAGE, "obs is a uint8 image with values up to 255"),
    (zoo.LongEpisodes, C.EPISODE_NEVER_ENDS, "the first ended at step 3000, and the checks judged all 3000 steps; "
                                             "pass --steps 30000"),
    (zoo.LargeScaleObs, C.OBS_UNSCALED, "3 field(s) of obs reach the model far from unit scale: RMS up to 3"),
]


def test_observations_normalised_by_a_wrapper_are_not_unscaled():
    """The twin of LargeScaleObs: gymnasium's NormalizeObservation around the same env."""
    report = check_env(zoo.large_scale_obs_normalized, steps=1000, seed=0)
    assert C.OBS_UNSCALED not in {e.code for e in report.events}
    assert report.codes(C.WARN) == set(), [e.log_line() for e in report.events if e.status != C.PASS]


@pytest.mark.parametrize("env,code,fragment", ADVISORY_CASES, ids=[a[0].__name__ for a in ADVISORY_CASES])
def test_advisory_is_shown_but_passes(env, code, fragment):
    report = check_env(env, steps=1000, seed=0)
    (hit,) = [e for e in report.events if e.code == code]
    assert hit.status == C.PASS and hit.advisory and hit.evidence["advisory"] is True
    assert hit.message.startswith("advisory: ") and fragment in hit.message, hit.message
    assert report.status == C.PASS and report.codes(C.WARN) == set() and report.exit_code(C.WARN) == 0
    assert code in report.codes(C.PASS) and hit in report.advisories()
    assert hit.module in {e.module for e in report.events if e.code == C.CHECKS_PASSED}  # its module still passed


def test_image_env_gets_the_scaling_advisory():
    report = check_env(zoo.CleanImage, steps=200)
    (hit,) = [e for e in report.events if e.code == C.OBS_UNNORMALIZED_IMAGE]
    assert hit.evidence["advisory"] is True and hit.evidence["max_value"] == 255


def test_image_min_side_is_the_threshold_that_makes_a_leaf_an_image():
    report = check_env(zoo.CleanImage, steps=200, thresholds={"image_min_side": 100})  # 84x84 frames
    assert C.OBS_UNNORMALIZED_IMAGE not in {e.code for e in report.events}


def test_never_ends_says_what_was_tried():
    (hit,) = [e for e in check_env(zoo.NeverEnds, steps=1000).events if e.code == C.EPISODE_NEVER_ENDS]
    assert hit.evidence["steps"] == 20000 and hit.evidence["budget"] == 1000
    assert hit.evidence["stopped_by"] == "steps" and hit.evidence["has_time_limit"] is False
    assert "no TimeLimit" in hit.message


def test_never_ends_with_a_time_limit_too_long_to_reach():
    env = gym.wrappers.TimeLimit(zoo.NeverEnds(), max_episode_steps=10**6)
    report = check_env(env, steps=500, thresholds={"episode_extension_factor": 4})
    (hit,) = [e for e in report.events if e.code == C.EPISODE_NEVER_ENDS]
    assert hit.status == C.WARN and hit.evidence["steps"] == 2000 and hit.evidence["has_time_limit"] is True
    assert "time limit of 1000000 steps" in hit.message


def test_extension_stops_at_the_wall_clock_cap():
    report = check_env(zoo.NeverEnds, steps=640, thresholds={"episode_extension_max_s": 0.0})
    (hit,) = [e for e in report.events if e.code == C.EPISODE_NEVER_ENDS]
    assert hit.status == C.WARN and hit.evidence["stopped_by"] == "time"
    assert report.summary["steps"] == 640 and "wall-clock cap" in hit.message


def test_short_episodes_get_no_extension_and_no_advisory():
    report = check_env(zoo.Base, steps=1000)
    assert report.summary["steps"] == 1000 and C.EPISODE_NEVER_ENDS not in report.codes(C.PASS)


def test_exotic_spaces_are_checked_and_noted():
    report = check_env(zoo.CleanExoticSpaces, steps=300)
    assert report.status == C.PASS and report.summary["steps"] == 300
    notes = report.summary["modules"][C.ENV_SPEC]["notes"]
    assert "obs['goal']: GoalSpace, checked by contains()" in notes
    assert "action['cmd']: Text, checked by contains()" in notes
    (row,) = [e for e in report.events if e.code == C.CHECKS_PASSED and e.module == C.ENV_SPEC]
    assert "obs['map']: Graph, checked by contains()" in row.message


def test_clean_envs_on_a_busy_machine():
    """Two processes spinning on both cores: the step-time rules must not fire."""
    burn = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for env in ("CartPole-v1", "Pendulum-v1", zoo.Base):
            report = check_env(env, steps=2000, seed=3)
            assert C.STEP_DURATION_OUTLIER not in report.codes(), report.summary["modules"]["ENV_SPEC"]
    finally:
        for p in burn:
            p.kill()
            p.wait()
