"""The replay-buffer rules on result dicts shaped as RLlib 2.60 writes them (``replay_buffer``:
``num_env_steps_stored``, ``num_env_steps_added_lifetime``, ``num_env_steps_sampled_lifetime``
-- the steps replayed -- and ``num_env_steps_evicted_lifetime``) and on what Flow1Callbacks
measure of the buffer in the driver (``flow1/replay``); then live: a DQN that starts learning
on an empty buffer, one whose buffer cannot fit the memory, and the buffer measured in the
driver of a real run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flow1_ray.common import codes as C
from flow1_ray import diagnose_curves
from flow1_ray.checks.learner.replay import native_ratio, train_batch

DQN = {"algo_class": "DQN", "train_batch_size_per_learner": 32, "num_learners": 0, "rollout_fragment_length": 1,
       "num_envs_per_env_runner": 1, "num_env_runners": 1, "num_steps_sampled_before_learning_starts": 1000,
       "replay_buffer_config": {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50000}, "explore": True}
SAC = {**DQN, "algo_class": "SAC", "train_batch_size_per_learner": 256, "num_steps_sampled_before_learning_starts": 1500,
       "replay_buffer_config": {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 1_000_000}}


def _run(iterations: int, *, added_per_iter: int = 1000, ratio: float = 32.0, capacity: int = 50000,
         returns=None, footprint=None, learning_from: int = 1) -> list[dict]:
    """``iterations`` results of a run adding ``added_per_iter`` steps an iteration and replaying
    ``ratio`` per step added once learning started (RLlib logs replay_buffer from then on)."""
    out, added, replayed = [], 0, 0
    for i in range(iterations):
        added += added_per_iter
        stored = min(added, capacity)
        r = {"training_iteration": i + 1, "num_env_steps_sampled_lifetime": added,
             "env_runners": {"episode_return_mean": returns[i] if returns else 20.0 + 10 * i, "num_episodes": 20}}
        if i + 1 >= learning_from:
            replayed += ratio * added_per_iter
            r["replay_buffer"] = {"num_env_steps_stored": stored - added_per_iter / 2, "num_env_steps_added_lifetime":
                                  added, "num_env_steps_sampled_lifetime": replayed,
                                  "num_env_steps_evicted_lifetime": max(0, added - capacity)}
            r["learners"] = {"default_policy": {"qf_mean": 1.0, "qf_max": 2.0, "qf_min": 0.5, "td_error_mean": 0.3,
                                                "default_optimizer_learning_rate": 5e-4}}
        if footprint is not None:
            r["flow1"] = {"replay": footprint(i, stored)}
        out.append(r)
    return out


def _codes(results, config, code):
    return [e for e in diagnose_curves(results, config=config) if e.code == code]


REPLAY = (C.REPLAY_UNDERFILLED, C.REPLAY_CAPACITY, C.REPLAY_RATIO, C.REPLAY_MEMORY)


@pytest.mark.parametrize("config, ratio", [(DQN, 32.0), (DQN, 10.7), (SAC, 64.0), (SAC, 256.0)])
def test_rllibs_defaults_and_the_matrixs_dqn_and_sac_are_silent(config, ratio):
    """Measured: DQN CartPole, 1 runner, 32.0 replayed per added step (2 runners: ~11); SAC
    Pendulum with the matrix's 64-step batch: 64."""
    stalled = [50.0] * 12
    results = _run(12, ratio=ratio, returns=stalled,
                   footprint=lambda i, s: {"capacity": config["replay_buffer_config"]["capacity"], "stored": s,
                                           "bytes_per_step": 37.0, "available": 20e9, "rss": 6e8 + 2000 * s})
    assert [e.code for e in diagnose_curves(results, config=config) if e.code in REPLAY] == []


def test_learning_on_a_buffer_smaller_than_its_batch_is_underfilled_once():
    """Measured: DQN CartPole, num_steps_sampled_before_learning_starts=0 with a 256-step batch:
    the first update samples 256 from 1 step."""
    config = {**DQN, "train_batch_size_per_learner": 256, "num_steps_sampled_before_learning_starts": 0}
    (f,) = _codes(_run(4, ratio=256.0), config, C.REPLAY_UNDERFILLED)
    assert f.iteration == 1 and f.evidence["stored_at_start"] == 1 and f.evidence["train_batch"] == 256
    assert "learning started with 1 steps in the replay buffer against a train batch of 256" in f.message
    knob = f.evidence["knobs"][0]
    assert (knob["knob"], knob["current"], knob["value"]) == ("num_steps_sampled_before_learning_starts", 0, 2560)
    # a sampling round of 8 runners x 64 envs fills two batches before the first update: silent
    assert _codes(_run(3), {**config, "num_env_runners": 8, "num_envs_per_env_runner": 64}, C.REPLAY_UNDERFILLED) == []
    # a buffer smaller than the batch: the capacity is the knob
    small = {**config, "num_steps_sampled_before_learning_starts": 5000, "replay_buffer_config": {"capacity": 100}}
    (f,) = _codes(_run(3, capacity=100), small, C.REPLAY_UNDERFILLED)
    assert f.evidence["knobs"][0]["knob"] == "replay_buffer_config"
    assert f.evidence["knobs"][0]["value"] == {"capacity": 25600}


def test_a_tiny_evicting_buffer_with_the_return_stalled_is_replay_capacity():
    stalled = [60.0] * 12
    config = {**DQN, "replay_buffer_config": {"type": "EpisodeReplayBuffer", "capacity": 500}}
    (f,) = _codes(_run(12, capacity=500, returns=stalled), config, C.REPLAY_CAPACITY)
    assert f.evidence["capacity"] == 500 and f.evidence["turnover_updates"] == pytest.approx(500)
    assert "15.6 train batches of 32" in f.message and "turns over every 500 updates" in f.message
    assert f.evidence["knobs"][0]["value"] == {"type": "EpisodeReplayBuffer", "capacity": 5000}
    # the same buffer while the return still climbs: a small buffer is not yet a problem
    assert _codes(_run(12, capacity=500), config, C.REPLAY_CAPACITY) == []
    # a buffer of 1,600 batches, full and stalled: capacity is not the cause
    assert _codes(_run(60, returns=[60.0] * 60), DQN, C.REPLAY_CAPACITY) == []


@pytest.mark.parametrize("config, ratio, found", [
    (DQN, 0.44, "most sampled steps are never trained on"),      # batch 32 over 8 runners x 8 envs
    (DQN, 300.0, "overfit"),
    (SAC, 4.0, "most sampled steps are never trained on"),
    (DQN, 1.0, None), (SAC, 64.0, None),
])
def test_a_replay_ratio_far_off_the_algorithms_is_named_with_the_return_stalled(config, ratio, found):
    got = _codes(_run(12, ratio=ratio, returns=[50.0] * 12), config, C.REPLAY_RATIO)
    if found is None:
        assert got == []
        return
    (f,) = got
    assert found in f.message and f.evidence["replay_ratio"] == pytest.approx(ratio)
    knob = f.evidence["knobs"][0]
    assert knob["knob"] == "training_intensity" and knob["value"] == {"DQN": 8.0, "SAC": 256.0}[config["algo_class"]]
    # the same ratio while the return rises: silent
    assert _codes(_run(12, ratio=ratio), config, C.REPLAY_RATIO) == []


def test_native_ratio_and_train_batch_follow_rllibs_formula():
    assert train_batch(DQN) == 32 and train_batch({**DQN, "num_learners": 4}) == 128
    assert native_ratio(DQN) == 16.0 and native_ratio({**DQN, "num_env_runners": 8, "num_envs_per_env_runner": 8}) == \
        pytest.approx(32 / 72)


def test_a_buffer_that_cannot_fit_the_memory_left_is_replay_memory_with_a_capacity_that_does():
    """Atari-sized steps (84x84x4 uint8: 28 KiB) and RLlib's capacity 1,000,000 against 20 GB."""
    per = 84 * 84 * 4 + 40
    config = {**DQN, "replay_buffer_config": {"capacity": 1_000_000}}
    foot = lambda i, s: {"capacity": 1_000_000, "stored": s, "bytes_per_step": float(per), "available": 20e9}
    (f,) = _codes(_run(3, footprint=foot), config, C.REPLAY_MEMORY)
    assert f.iteration == 1 and f.evidence["needed"] == pytest.approx((1_000_000 - 1000) * per)
    value = f.evidence["knobs"][0]["value"]["capacity"]
    assert value * per <= 0.5 * 20e9 + 1000 * per and value >= 0.4 * 20e9 / per
    assert "will run out of memory at" in f.message and "this host's available memory" in f.message
    # the driver's memory growing faster than the arrays say (small observations): the RSS slope counts
    small = lambda i, s: {"capacity": 10_000_000, "stored": s, "bytes_per_step": 36.0, "available": 8e9,
                          "rss": 6e8 + 4000.0 * s}
    big = {**DQN, "replay_buffer_config": {"capacity": 10_000_000}}
    (f,) = _codes(_run(12, footprint=small, capacity=10_000_000), big, C.REPLAY_MEMORY)
    assert f.evidence["bytes_per_step"] == pytest.approx(4000.0) and f.evidence["array_bytes_per_step"] == 36.0
    assert "the driver's memory growth per stored step" in f.message
    # ... and without the RSS the same buffer fits (360 MB): silent
    arrays_only = lambda i, s: {k: v for k, v in small(i, s).items() if k != "rss"}
    assert _codes(_run(12, footprint=arrays_only, capacity=10_000_000), big, C.REPLAY_MEMORY) == []


def test_offline_rl_and_on_policy_runs_are_silent():
    results = _run(12, ratio=0.1, returns=[50.0] * 12, capacity=100)
    offline = {**DQN, "input_": "/data/episodes", "replay_buffer_config": {"capacity": 100}}
    assert [e.code for e in diagnose_curves(results, config=offline) if e.code in REPLAY] == []
    ppo = [{k: v for k, v in r.items() if k != "replay_buffer"} for r in results]
    assert [e.code for e in diagnose_curves(ppo, config={**DQN, "algo_class": "PPO"}) if e.code in REPLAY] == []


def test_flow1_diagnose_on_a_plain_result_json_reads_the_buffer_and_says_what_it_cannot(tmp_path, cli_env):
    """A plain Tune result.json (no flow1): the ratio is judged from RLlib's replay_buffer
    keys; the buffer's memory is listed as not assessable."""
    import subprocess
    import sys

    path = tmp_path / "result.json"
    path.write_text("".join(json.dumps({**r, "config": DQN}) + "\n" for r in _run(12, ratio=0.3, returns=[50.0] * 12)))
    out = subprocess.run([sys.executable, "-m", "flow1_ray", "diagnose", str(path), "--json", "-"],
                         capture_output=True, text=True, env=cli_env, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert C.REPLAY_RATIO in {e["code"] for e in report["events"]}, report
    assert any("REPLAY_MEMORY" in line and "not assessable without Flow1Callbacks" in line
               for line in report["not_assessable"]), report["not_assessable"]


def test_the_footprint_measures_a_real_rllib_buffer_and_bounds_a_long_list():
    """RLlib's own EpisodeReplayBuffer with real episodes (no cluster needed): the bytes per
    stored step are at least the observation's; a 100,000-item list is sampled, not walked."""
    from types import SimpleNamespace

    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

    from flow1_ray.driver.replay_footprint import _nbytes, replay_footprint

    buf = EpisodeReplayBuffer(capacity=10_000)
    for _ in range(3):
        eps = SingleAgentEpisode(observations=[np.zeros(256, np.float32)], len_lookback_buffer=0)
        for t in range(20):
            eps.add_env_step(np.full(256, t, np.float32), 1, 1.0, terminated=t == 19)
        buf.add([eps.to_numpy()])
    foot = replay_footprint(SimpleNamespace(local_replay_buffer=buf))
    assert foot["capacity"] == 10_000 and foot["stored"] == 60
    assert 1024 <= foot["bytes_per_step"] < 1024 * 1.2, foot     # 256 float32 a step, plus a few numbers
    assert foot["available"] > 0 and replay_footprint(SimpleNamespace()) is None
    assert _nbytes([np.zeros(4, np.float32)] * 100_000) == 1_600_000
