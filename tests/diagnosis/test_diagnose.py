"""The diagnosis of a run's findings (flow1_ray/diagnosis): the primary symptom, what follows
from it, the causes ranked by the run's evidence, the change as config lines, a what-if's
verdict as the cause's standing. The findings are the ones flow1's rules raise (their codes,
evidence and advice as the rules write them; the sick PPO run's as test_learner_live reads
them: tests/fixtures/sick_findings.py), the config the run's ``run.json`` settings."""

from __future__ import annotations

import pytest

from flow1_ray.checks.advice import Knobs, config_settings, lower_lr
from flow1_ray.common import codes as C
from flow1_ray.common.events import Event
from flow1_ray.diagnosis.diagnose import diagnose
from flow1_ray.diagnosis.change import value_at
from flow1_ray.diagnosis.diagnose import HEALTHY, NOT_ASSESSABLE, OBSERVED, SHORT, SICK, TESTED_HELD, TWO_OR_MORE

from sick_findings import JUDGED, PPO, finding, lr_knob, sick_ppo

def test_the_sick_ppo_run_is_one_diagnosis_the_lr_first_with_its_chain():
    d = diagnose(sick_ppo(), JUDGED, PPO, run="runs/sick").to_dict()
    assert d["state"] == SICK and d["primary"]["code"] == C.KL_SPIKE and d["primary"]["iteration"] == 1
    assert {c["code"] for c in d["chain"]} == {C.ENTROPY_COLLAPSE, C.GRADIENT_ZERO, C.CLIP_FRACTION, C.KL_TOO_HIGH,
                                               C.VALUE_NOT_LEARNING}
    assert d["others"] == []
    top = d["causes"][0]
    assert top["id"] == "step_too_large" and top["standing"] == TWO_OR_MORE, top
    # the KL, the clip fraction and the entropy measured, the lr and the epochs set: 5 signals
    assert top["support"] == 5 and top["contradicted"] == 0
    assert {s["signal"] for s in top["for"]} == {"KL", "clip fraction", "entropy", "lr", "num_epochs"}
    ch = top["change"]
    assert ch["knob"] == "lr" and ch["before"] == "config.training(lr=0.05)"
    assert ch["after"] == f"config.training(lr={ch['value']!r})" and 0 < ch["value"] < 0.05
    assert top["expected"].startswith("untested: run `flow1 whatif runs/sick --from-advice`")
    assert "most likely cause: the policy's update step is too large" in d["line"] and "lr 0.05 ->" in d["line"]


def test_a_what_ifs_verdict_on_the_advised_change_is_the_causes_standing():
    """The live what-if test of the sick run: the advised lr held on the collapse (p 0.05), was
    inconclusive on the KL spike, and a --set lr=0.5 did not hold: the cause is tested, held."""
    lr = f"lr={lr_knob().value}"
    rows = [{"branch": "lr=0.5", "finding": C.KL_SPIKE, "verdict": "harmful", "why": "the return fell"},
            {"branch": lr, "finding": C.KL_SPIKE, "verdict": "inconclusive", "why": "a gain these seeds cannot tell"},
            {"branch": lr, "finding": C.ENTROPY_COLLAPSE, "verdict": "held", "why": "entropy 0 -> 0.9 (p 0.05)",
             "symptom": {"p_better": 0.05}}]
    top = diagnose(sick_ppo(), JUDGED, PPO, whatifs=rows).to_dict()["causes"][0]
    assert top["id"] == "step_too_large" and top["standing"] == TESTED_HELD, top
    assert top["tested"] == {"branch": lr, "finding": C.ENTROPY_COLLAPSE, "verdict": "held",
                             "why": "entropy 0 -> 0.9 (p 0.05)", "p_better": 0.05}
    assert top["expected"].startswith(f"what-if {lr}: held")
    # a value nobody advised (--set lr=0.5) does not test the advice, whatever its verdict
    assert diagnose(sick_ppo(), JUDGED, PPO, whatifs=rows[:1]).to_dict()["causes"][0]["standing"] == TWO_OR_MORE
    # an inconclusive verdict alone leaves the standing to the signals
    assert diagnose(sick_ppo(), JUDGED, PPO, whatifs=rows[1:2]).to_dict()["causes"][0]["standing"] == TWO_OR_MORE
    # harmful: the cause goes to the bottom with its verdict
    bad = [dict(rows[2], verdict="harmful", why="the return fell")]
    causes = diagnose(sick_ppo(), JUDGED, PPO, whatifs=bad).to_dict()["causes"]
    assert causes[-1]["id"] == "step_too_large" and causes[-1]["standing"] == "tested: harmful"


def test_an_env_fault_is_primary_and_the_curves_follow_from_it():
    """REWARD_UNEARNED (the reward computed after the env moved its goal) and a sick curve:
    the env is the primary symptom, the curve findings are its consequences."""
    events = [finding(C.REWARD_UNEARNED, 2, attribute="goal")] + sick_ppo()[:2]
    d = diagnose(events, JUDGED, PPO).to_dict()
    assert d["primary"]["code"] == C.REWARD_UNEARNED and d["primary"]["stage"] == "env"
    assert {c["code"] for c in d["chain"]} == {C.KL_SPIKE, C.ENTROPY_COLLAPSE}
    assert all("data the env made wrong (REWARD_UNEARNED)" in c["why"] for c in d["chain"])
    (cause,) = d["causes"]
    assert cause["standing"] == OBSERVED and cause["id"] == "reward_unearned"


def test_what_the_pipeline_made_of_the_data_is_primary_over_the_curves_it_explains():
    """A runner's first window found the initial policy collapsed (action logits scaled up in
    the RLModule) and the KL then spiked: the pipeline is the primary symptom, the KL spike
    follows from it and no lr advice is offered as the cause; a pipeline finding explains no death."""
    collapsed = finding(C.PIPE_POLICY_COLLAPSED, 0, worker=1, pid=5, dist="categorical", entropy_ratio=0.0)
    d = diagnose([collapsed] + sick_ppo()[:2], JUDGED, PPO).to_dict()
    assert d["primary"]["code"] == C.PIPE_POLICY_COLLAPSED and d["primary"]["stage"] == "pipeline"
    assert {c["code"] for c in d["chain"]} == {C.KL_SPIKE, C.ENTROPY_COLLAPSE}
    assert all("what the connectors and the RLModule made of the env's data (PIPE_POLICY_COLLAPSED)" in c["why"]
               for c in d["chain"])
    (cause,) = d["causes"]
    assert cause["id"] == "pipe_policy_collapsed" and cause["standing"] == OBSERVED
    # upstream of it, the env's own fault stays first; a death does not follow from the pipeline
    env = finding(C.REWARD_UNEARNED, 0, attribute="goal")
    assert diagnose([env, collapsed], JUDGED, PPO).to_dict()["primary"]["code"] == C.REWARD_UNEARNED
    deaths = [finding(C.WORKER_DIED, i, worker=1, pid=10 + i) for i in (1, 2, 3)]
    d = diagnose([collapsed] + deaths, JUDGED, PPO).to_dict()
    assert C.WORKER_DIED not in {c["code"] for c in d["chain"]}


def test_one_death_explains_no_curve_and_deaths_every_iteration_do():
    one = [finding(C.WORKER_DIED, 1, worker=1, pid=11)] + sick_ppo()
    d = diagnose(one, JUDGED, PPO).to_dict()
    assert d["primary"]["code"] == C.KL_SPIKE and [o["code"] for o in d["others"]] == [C.WORKER_DIED]
    many = [finding(C.WORKER_DIED, i, worker=1, pid=10 + i) for i in (1, 2, 3)] + sick_ppo()[:2]
    d = diagnose(many, JUDGED, PPO).to_dict()
    assert d["primary"]["code"] == C.WORKER_DIED
    assert {c["code"] for c in d["chain"]} == {C.KL_SPIKE, C.ENTROPY_COLLAPSE}
    assert "3 death(s)" in d["chain"][0]["why"]


def test_a_death_that_names_the_envs_crash_follows_from_it():
    crash = finding(C.ENV_CRASHED, 1, worker=1, pid=7)
    died = finding(C.WORKER_DIED, 1, worker=1, pid=7, likely_origin={"code": C.ENV_CRASHED, "ts": crash.ts.timestamp()})
    d = diagnose([crash, died], None, None).to_dict()
    assert d["primary"]["code"] == C.ENV_CRASHED and [c["code"] for c in d["chain"]] == [C.WORKER_DIED]


def test_a_cause_whose_signals_had_too_little_data_is_not_assessable():
    """ENTROPY_COLLAPSE alone and no config recorded: the step cause and the missing bonus
    each have the entropy and nothing more; the settings that would tell them apart are named
    as not assessable, never counted. With no learner curves at all, no finding sign is
    assessable either."""
    d = diagnose([finding(C.ENTROPY_COLLAPSE, 2)], JUDGED, None).to_dict()
    by = {c["id"]: c for c in d["causes"]}
    assert by["no_entropy_bonus"]["support"] == 1 and by["step_too_large"]["support"] == 1
    assert "lr: the run's config is not recorded" in by["step_too_large"]["not_assessable"]
    assert "entropy_coeff: the run's config is not recorded" in by["no_entropy_bonus"]["not_assessable"]
    # with the config: entropy_coeff 0 corroborates the missing bonus, lr 3e-4 does not speak for the step
    d = diagnose([finding(C.ENTROPY_COLLAPSE, 2)], JUDGED, {**PPO, "lr": 3e-4, "num_epochs": 4}).to_dict()
    assert d["causes"][0]["id"] == "no_entropy_bonus" and d["causes"][0]["support"] == 2
    # a trend rule short of data: its sign is not assessable, with the rule's need
    short = {"judged": ["ENTROPY_COLLAPSE"], "short": {"VALUE_NOT_LEARNING": "needs 5 iterations with its signal; had 2"}}
    d = diagnose([finding(C.GRADIENT_ZERO, 2, cause="value_loss_clipped")], short, PPO).to_dict()
    clipped = next(c for c in d["causes"] if c["id"] == "value_loss_clipped")
    assert clipped["support"] == 1 and clipped["standing"] != NOT_ASSESSABLE
    assert clipped["not_assessable"] == ["value fit: VALUE_NOT_LEARNING needs 5 iterations with its signal; had 2"]


def test_a_config_setting_alone_never_supports_a_cause():
    d = diagnose([finding(C.KL_SPIKE, 1)], JUDGED, PPO).to_dict()
    blowup = next(c for c in d["causes"] if c["id"] == "gradient_blowup")
    assert blowup["support"] == 0 and blowup["standing"] != TWO_OR_MORE


def test_healthy_short_and_not_judged_runs():
    assert diagnose([], JUDGED, PPO).state == HEALTHY
    advisory = Event(C.REWARD_SPARSE, "advisory: sparse", {"advisory": True}, status=C.PASS)
    assert diagnose([advisory], JUDGED, PPO).state == HEALTHY
    assert diagnose([], None, None, short="not enough data to judge learning: 2 iterations").state == SHORT
    assert diagnose([], None, None, not_judged="no start record").state == "not judged"
    # flow1's own codes are never the run's symptom
    assert diagnose([Event(C.FLOW1_INTERNAL, "x", {})], JUDGED, PPO).state == HEALTHY


def test_a_schedule_is_read_at_the_symptoms_step_and_rescaled():
    sched = [[0, 0.05], [100_000, 0.005]]
    assert value_at(sched, 50_000) == pytest.approx(0.0275) and value_at(sched, -1) == 0.05 and value_at(sched, 10**9) == 0.005
    spike = finding(C.KL_SPIKE, 1, knobs=[lower_lr(Knobs(), 0.0275, 1199.0, "KL")], kl=1199.0)
    spike.env_step = 50_000
    ch = diagnose([spike], JUDGED, {**PPO, "lr": sched}).to_dict()["causes"][0]["change"]
    s = ch["schedule"]
    assert s["value_at_step"] == pytest.approx(0.0275) and s["step"] == 50_000
    assert [t for t, _ in s["after"]] == [0, 100_000] and abs(s["after"][0][1] / 0.05 - ch["value"] / 0.0275) < 0.05


def test_the_config_settings_of_an_algorithm_config_read_back_as_its_knobs():
    from ray.rllib.algorithms.ppo import PPOConfig

    s = config_settings(PPOConfig().training(lr=[[0, 0.01], [1000, 0.001]], num_epochs=7, entropy_coeff=0.02))
    k = Knobs.from_config(s)
    assert s["lr"] == [[0.0, 0.01], [1000.0, 0.001]] and k.lr == 0.01 and k.algo == "PPO"
    assert k.num_epochs == 7 and k.entropy_coeff == 0.02
    assert config_settings(None) == {} and config_settings(object()) == {}
