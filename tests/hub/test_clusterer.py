"""The StateClusterer's engine, its trends, the runner-side sampler and the heatmap writer,
without a Ray cluster: synthetic states of known structure, real RLlib episodes, real
files. (The same parts on a real run: tests/live/test_rllib_callbacks.py.)"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from gymnasium import spaces

from flow1_ray.common import codes as C
from flow1_ray import load_clusters, load_events
from flow1_ray.hub.clusterer_core import ClustererCore, heatmap_name
from flow1_ray.hub.heatmaps import HeatmapWriter
from flow1_ray.hub.recorder import RecorderCore
from flow1_ray.checks.states.state_action import (FIXATED, OK, Snapshot, StateActionThresholds, decided_share,
    trend_findings, verdicts, warn_codes)
from flow1_ray.clustering.state_action_map import policy_stats
from state_blobs import EXPECTED, blobs

LABELS = [str(i) for i in range(6)]


def feed(core: ClustererCore, x, a, f, batches: int = 10, policy=None) -> None:
    for idx in np.array_split(np.random.default_rng(1).permutation(len(x)), batches):
        assert core.ingest_rows(x[idx], a[idx], f[idx], LABELS, None if policy is None else policy[idx])


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.parametrize("backend", [
    "sklearn",
    "torch",  # on CPU tensors here: the torch backend's logic runs in CI
    pytest.param("torch-cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="no CUDA device")]),
])
def test_streamed_blobs_get_their_verdicts_and_one_event_per_code(backend):
    x, a, f, truth = blobs()
    core = ClustererCore(n_clusters=6, backend=backend.split("-")[0],
                         device={"torch": "cpu", "torch-cuda": "cuda"}.get(backend))
    feed(core, x, a, f)
    out = core.compute_snapshot(iteration=10, return_mean=20.0)
    rows = out.rows.to_pylist()
    assert len(rows) == 6 and {r["iteration"] for r in rows} == {10} and {r["snapshot"] for r in rows} == {0}
    assert sum(r["size"] for r in rows) == len(x)
    # each blob lands in one cluster, whose verdict is the blob's
    z = core.km.transform(x.astype(np.float32))
    owner = ((z[:, None, :] - core.km.centroids[None]) ** 2).sum(-1).argmin(1)
    for name, verdict in EXPECTED.items():
        (cluster,) = np.unique(owner[truth == name])
        assert rows[cluster]["verdict"] == verdict, (name, [r["verdict"] for r in rows])
    codes = [e["code"] for e in out.events]
    assert codes[0] == C.STATE_SNAPSHOT and sorted(codes[1:]) == sorted([C.CHAOS, C.BLIND_SPOT, C.ERROR_FIXATION])
    assert out.heatmap["path"] == heatmap_name(10) == "heatmaps/iter_000010.png"
    assert core.compute_snapshot(iteration=11) is None  # nothing arrived since


def test_policy_entropy_tells_chaos_from_a_cluster_straddling_a_decision_boundary():
    """Near-uniform counts from a confident policy (it picks 0 on one side of the cluster,
    1 on the other) are not CHAOS; the same counts from an undecided policy are."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (4000, 3)).astype(np.float32)
    a = (x[:, 0] > 0).astype(np.int64)
    confident = np.where(a[:, None] == 1, [[-4.0, 4.0]], [[4.0, -4.0]])
    undecided = rng.normal(0, 0.05, (4000, 2))
    counts = np.array([[np.sum(a == 0), np.sum(a == 1)]])
    assert verdicts(counts) == [C.CHAOS]
    assert verdicts(counts, policy=policy_stats(confident).mean(0, keepdims=True)) == [OK]
    assert verdicts(counts, policy=policy_stats(undecided).mean(0, keepdims=True)) == [C.CHAOS]
    core = ClustererCore(n_clusters=1, backend="sklearn")
    assert core.ingest_rows(x, a, np.zeros(4000), ["0", "1"], policy_stats(confident))
    out = core.compute_snapshot(iteration=1)
    assert out.rows.column("verdict").to_pylist() == [OK]
    assert out.rows.column("policy_entropy")[0].as_py() < 0.01


def test_rare_state_is_rare_over_the_run_not_over_the_window():
    """A region visited early and then avoided (the policy learnt to) is not RARE_STATE."""
    rng = np.random.default_rng(0)
    early = np.concatenate([rng.normal(0, 1, (3000, 2)), rng.normal(30, 1, (3000, 2))]).astype(np.float32)
    core = ClustererCore(n_clusters=2, backend="sklearn")
    core.ingest_rows(early, rng.integers(0, 2, 6000), np.zeros(6000), ["0", "1"])
    core.compute_snapshot(iteration=1)
    late = rng.normal(0, 1, (3000, 2)).astype(np.float32)
    core.ingest_rows(late, rng.integers(0, 2, 3000), np.zeros(3000), ["0", "1"])
    rows = core.compute_snapshot(iteration=2).rows.to_pylist()
    empty = [r for r in rows if r["size"] == 0]
    assert len(empty) == 1 and empty[0]["verdict"] == OK


def test_window_is_bounded_and_bad_batches_are_rejected():
    core = ClustererCore(n_clusters=4, backend="sklearn", window_rows=5000)
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert core.ingest_rows(rng.normal(size=(1000, 3)), rng.integers(0, 6, 1000), np.zeros(1000), LABELS)
    assert not core.ingest_rows(rng.normal(size=(10, 4)), np.zeros(10), np.zeros(10), LABELS)  # dim 4, run's 3
    assert not core.ingest_rows(rng.normal(size=(10, 3)), np.zeros(9), np.zeros(10), LABELS)
    st = core.status()
    assert st["received"] == 20_000 and st["window"] == 5000 and st["rejected"] == 2
    assert sum(core.compute_snapshot(iteration=1).rows.column("size").to_pylist()) == 5000


def test_nan_states_are_left_out_not_poisoning_every_later_refit():
    rng = np.random.default_rng(0)
    core = ClustererCore(n_clusters=3, backend="sklearn")
    bad = rng.normal(size=(500, 2)).astype(np.float32)
    bad[::50, 1] = np.nan
    bad[7, 0] = np.inf
    assert core.ingest_rows(bad, rng.integers(0, 2, 500), np.zeros(500), ["0", "1"])
    assert core.status()["nonfinite"] == 11 and core.status()["received"] == 489
    for it in (1, 2, 3):
        out = core.compute_snapshot(iteration=it)
        assert out is not None and np.isfinite(core.km.centroids).all()
        core.ingest_rows(rng.normal(size=(500, 2)), rng.integers(0, 2, 500), np.zeros(500), ["0", "1"])


def test_a_small_first_window_does_not_fix_the_number_of_clusters():
    rng = np.random.default_rng(0)
    core = ClustererCore(n_clusters=8, backend="sklearn")
    core.ingest_rows(rng.normal(size=(5, 2)), rng.integers(0, 2, 5), np.zeros(5), ["0", "1"])
    assert core.compute_snapshot(iteration=1).rows.num_rows == 5
    core.ingest_rows(rng.normal(size=(400, 2)), rng.integers(0, 2, 400), np.zeros(400), ["0", "1"])
    assert core.compute_snapshot(iteration=2).rows.num_rows == 8


def _snap(i, visits, verdicts_, ret, centroids=None):
    k = len(visits)
    c = np.arange(k, dtype=np.float32)[:, None] * 10 if centroids is None else centroids
    return Snapshot(i, 10 * (i + 1), c, np.asarray(visits, float), list(verdicts_), ret)


def test_lost_states_growing_needs_a_rise_at_each_snapshot():
    th = StateActionThresholds()
    lost = lambda share: [C.CHAOS if j < round(share * 10) else OK for j in range(10)]  # noqa: E731
    rising = [_snap(i, [100] * 10, lost(s), 10.0 * i) for i, s in enumerate([0.1, 0.2, 0.3, 0.4])]
    codes = [f.code for f in trend_findings(rising, th)]
    assert codes == [C.LOST_STATES_GROWING]
    assert "10% -> 20% -> 30% -> 40%" in trend_findings(rising, th)[0].message
    wobbly = [_snap(i, [100] * 10, lost(s), 10.0 * i) for i, s in enumerate([0.1, 0.3, 0.2, 0.4])]
    assert trend_findings(wobbly, th) == []
    small = [_snap(i, [100] * 10, lost(s), 10.0 * i) for i, s in enumerate([0.1, 0.1, 0.1, 0.2])]
    assert trend_findings(small, th) == []


def test_new_fixation_without_return_gain_and_clusters_matched_across_a_refit():
    th = StateActionThresholds()
    prev = _snap(0, [100, 100, 100], [OK, OK, FIXATED], 50.0)
    # the refit listed the same three clusters in another order: the fixated one now first
    cur_c = np.array([[20.0], [0.0], [10.0]], np.float32)
    flat = _snap(1, [100, 100, 100], [FIXATED, FIXATED, OK], 50.5, cur_c)
    found = trend_findings([prev, flat], th)
    assert [f.code for f in found] == [C.NEW_FIXATION]
    # confident without a gain is also a converged policy at its best: informational only
    assert found[0].evidence["clusters"] == [1] and found[0].status == C.PASS and "informational" in found[0].message
    fell = _snap(1, [100, 100, 100], [FIXATED, FIXATED, OK], 30.0, cur_c)  # confident and 40 % worse
    (warned,) = trend_findings([prev, fell], th)
    assert warned.status == C.WARN and "entropy_coeff" in warned.message
    paid_off = _snap(1, [100, 100, 100], [FIXATED, FIXATED, OK], 80.0, cur_c)
    assert trend_findings([prev, paid_off], th) == []
    same = _snap(1, [100, 100, 100], [FIXATED, OK, OK], 50.0, cur_c)  # only the old fixation
    assert trend_findings([prev, same], th) == []


def test_sampler_takes_rows_from_real_rllib_episodes():
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from flow1_ray.runner.sender import Sender
    from flow1_ray.runner.states import StateSampler

    sender = Sender("runner/states", lambda: None, 1)  # the clusterer not reachable yet
    obs_space, act_space = spaces.Box(-1, 1, (3,)), spaces.Discrete(2)
    eps = []
    for n, terminated, lookback in ((50, True, 0), (30, False, 0), (20, False, 3)):
        # the third is a continued chunk: 3 earlier steps sit in its lookback buffer
        logits = np.tile([[3.0, -3.0]], (n + lookback, 1))
        ep = SingleAgentEpisode(observations=[np.full(3, i / 100, np.float32) for i in range(n + lookback + 1)],
                                actions=[i % 2 for i in range(n + lookback)], rewards=[1.0] * (n + lookback),
                                extra_model_outputs={"action_dist_inputs": list(logits)},
                                terminated=terminated, len_lookback_buffer=lookback, observation_space=obs_space,
                                action_space=act_space)
        assert len(ep) == n
        eps.append(ep.to_numpy())
    sampler = StateSampler(obs_space, act_space, 1.0, sender, send_every_s=0.0)
    assert sampler.add(eps) == 100
    assert sampler.maybe_send() is None and sampler.buffered == 100  # kept until it is
    b = sampler.batch()["modules"]["default_policy"]
    assert b["x"].shape == (100, 3) and list(b["a"][:4]) == [0, 1, 0, 1] and b["labels"] == ["0", "1"]
    assert b["fail"].sum() == 1 and b["fail"][49]  # the last step of the terminated episode only
    assert np.allclose(b["x"][:50, 0], np.arange(50) / 100)  # the state each action was taken in
    assert np.allclose(b["x"][80:, 0], np.arange(3, 23) / 100) and list(b["a"][80:83]) == [1, 0, 1]
    assert b["policy"].shape == (100, 2) and b["policy"][0, 1] > 0.99
    for _ in range(100):  # the clusterer stays unreachable: the buffer keeps its bound, drops counted
        sampler.add(eps)
    assert sampler.buffered <= 8192 and sender.dropped == (10_100 - sampler.buffered) // 100 > 0
    with pytest.raises(ValueError, match="unsupported action space"):
        StateSampler(obs_space, spaces.Tuple([act_space, act_space]), 1.0, sender)
    core = ClustererCore(n_clusters=4, backend="sklearn")
    assert core.ingest_rows(b["x"], b["a"], b["fail"], b["labels"], b["policy"])


def test_heatmap_writer_drops_when_behind_and_never_blocks(tmp_path):
    x, a, f, _ = blobs(per=300)
    core = ClustererCore(n_clusters=6, backend="sklearn")
    feed(core, x, a, f, batches=2)
    job = core.compute_snapshot(iteration=3).heatmap
    w = HeatmapWriter(tmp_path, max_queued=1)
    accepted = sum(w.submit({**job, "path": f"heatmaps/iter_{i:06d}.png"}) for i in range(30))
    assert accepted < 30 and w.dropped == 30 - accepted
    assert w.drain(60)
    written = sorted(p.name for p in (tmp_path / "heatmaps").glob("*.png"))
    assert len(written) == accepted == w.written and not list((tmp_path / "heatmaps").glob(".*"))
    if sys.platform.startswith("linux"):  # rendered at a lower priority than the requests
        assert w.status()["priority"] == "nice +10"
    bad = HeatmapWriter(tmp_path / "file")
    (tmp_path / "file").write_text("not a directory")
    bad.submit(job)
    assert bad.drain(30) and bad.failed == 1 and "Error" in bad.last_error


def test_a_warmed_heatmap_writer_writes_nothing_until_asked_then_renders(tmp_path):
    """warm_up() starts the render thread early (the run's start pays matplotlib's import);
    it must neither write a file nor change what a later job renders."""
    w = HeatmapWriter(tmp_path)
    w.warm_up()
    w.warm_up()  # idempotent: one thread
    assert w.drain(30) and not (tmp_path / "heatmaps").exists()
    x, a, f, _ = blobs(per=300)
    core = ClustererCore(n_clusters=6, backend="sklearn")
    feed(core, x, a, f, batches=2)
    assert w.submit(core.compute_snapshot(iteration=1).heatmap) and w.drain(60)
    assert [p.name for p in (tmp_path / "heatmaps").glob("*.png")] == ["iter_000001.png"] and w.written == 1


def test_recorder_writes_snapshot_rows_events_and_heatmap(tmp_path):
    x, a, f, _ = blobs(per=300)
    core = ClustererCore(n_clusters=6, backend="sklearn")
    feed(core, x, a, f, batches=3)
    rec = RecorderCore(str(tmp_path), "run")
    for it in (5, 10):
        feed(core, x, a, f, batches=3)
        out = core.compute_snapshot(iteration=it, return_mean=1.0)
        rec.add_snapshot(out.payload())
    rec.flush()
    assert rec.heatmaps.drain(60)
    t = load_clusters(tmp_path)
    assert t.num_rows == 12 and sorted(set(t.column("iteration").to_pylist())) == [5, 10]
    assert {p.name for p in (tmp_path / "heatmaps").glob("*.png")} == {"iter_000005.png", "iter_000010.png"}
    codes = load_events(tmp_path).column("code").to_pylist()
    assert codes.count(C.STATE_SNAPSHOT) == 2
    assert rec.status()["snapshots"] == 2 and rec.status()["heatmaps"]["written"] == 2


def test_huge_multi_dimensional_actions_are_judged_on_their_leading_dimensions():
    from flow1_ray.clustering.state_action_map import action_index

    md = spaces.MultiDiscrete([3] * 20, seed=0)
    idx, labels = action_index(np.array([md.sample() for _ in range(50)]), md)
    assert len(labels) == 3 ** 5 and idx.max() < 3 ** 5
    mb = spaces.MultiBinary(30, seed=0)
    idx, labels = action_index(np.array([mb.sample() for _ in range(50)]), mb)
    assert len(labels) == 256 and idx.max() < 256


@pytest.mark.parametrize("bad", [{"n_clusters": 0}])
def test_clusterer_rejects_bad_settings(bad):
    with pytest.raises(ValueError, match="n_clusters"):
        ClustererCore(**bad)


def _lost(share, decided, i=0):
    """A snapshot of 10 equal clusters: ``share`` of them CHAOS, ``decided`` of the states decided."""
    return Snapshot(i, 10 * (i + 1), np.zeros((10, 1), np.float32), np.full(10, 100.0),
                    [C.CHAOS if j < round(share * 10) else OK for j in range(10)], None, decided)


@pytest.mark.parametrize("snaps,warn", [
    ([(0.4, 0.0), (0.4, 0.0)], False),      # undecided everywhere (early training, epsilon = 1): expected
    ([(0.1, 0.8), (0.0, 0.9)], False),      # material once, gone at the next snapshot
    ([(0.0, 0.9), (0.4, 0.5)], False),      # one snapshot is not persistence
    ([(0.3, 0.5), (0.4, 0.5)], True),       # material, persistent, and the policy learnt elsewhere
    ([(0.3, 0.5), (0.4, 0.1)], False),      # ... but no longer decided anywhere: not a regional claim
], ids=["undecided-everywhere", "gone", "once", "persistent", "lost-everywhere"])
def test_chaos_is_a_warn_only_when_material_persistent_and_regional(snaps, warn):
    history = [_lost(s, d, i) for i, (s, d) in enumerate(snaps)]
    assert (C.CHAOS in warn_codes(history)) is warn


def test_a_converged_run_with_a_few_boundary_clusters_is_silent():
    """Measured: a default PPO CartPole run at return 500 had 2 of 30 clusters (2.7 %) CHAOS."""
    th = StateActionThresholds()
    counts = np.array([[50, 50]] * 2 + [[140, 0]] * 14 + [[0, 140]] * 14)
    policy = np.array([[0.99, 0.55]] * 2 + [[0.05, 0.99]] * 28)
    assert decided_share(counts, policy, th) > 0.9
    v = verdicts(counts, policy=policy)
    assert v.count(C.CHAOS) == 2
    history = [Snapshot(i, 10 * i, np.zeros((30, 1)), counts.sum(1), v, 500.0, decided_share(counts, policy, th))
               for i in range(3)]
    assert warn_codes(history, th) == set()


def test_epsilon_greedy_policy_stats():
    from flow1_ray.runner.states import epsilon_greedy_stats

    h, top = epsilon_greedy_stats(1.0, 2)
    assert abs(h - 1.0) < 1e-6 and abs(top - 0.5) < 1e-6          # random by design
    h, top = epsilon_greedy_stats(0.05, 2)
    assert h < 0.2 and abs(top - 0.975) < 1e-6                      # decided once epsilon decayed
    assert abs(epsilon_greedy_stats(0.0, 4)[0]) < 1e-6


def test_sampler_splits_multi_agent_episodes_per_module():
    """A real MultiAgentEnvRunner (no Ray cluster needed): each agent's steps go to the
    module it is mapped to, with that module's own spaces and policy."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    from flow1_ray.runner.sender import Sender
    from flow1_ray.runner.states import StateSampler

    cfg = (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})
           .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}"))
    runner = MultiAgentEnvRunner(config=cfg)
    try:
        episodes = runner.sample(num_timesteps=300)
        steps = {mid: sum(len(e.agent_episodes[aid]) for e in episodes for aid in e.agent_episodes
                          if e.module_for(aid) == mid) for mid in ("p0", "p1")}
        resolve = lambda mid: (runner.module[mid].observation_space, runner.module[mid].action_space,  # noqa: E731
                               runner.module[mid])
        sampler = StateSampler(None, None, 1.0, Sender("r/states", lambda: None, 1), resolve=resolve)
        assert sampler.add(episodes) == sum(steps.values())
        rows = sampler.batch()["modules"]
        assert set(rows) == {"p0", "p1"} and not sampler.unsupported
        for mid in ("p0", "p1"):
            assert rows[mid]["x"].shape == (steps[mid], 4) and rows[mid]["labels"] == ["0", "1"]
            assert np.isfinite(rows[mid]["policy"]).all()  # each module's own Categorical logits
        core = ClustererCore(n_clusters=4, backend="sklearn", module="p1")
        assert core.ingest_rows(rows["p1"]["x"], rows["p1"]["a"], rows["p1"]["fail"], rows["p1"]["labels"],
                                rows["p1"]["policy"])
        out = core.compute_snapshot(iteration=3)
        assert set(out.rows.column("module").to_pylist()) == {"p1"}
        assert out.heatmap["path"] == heatmap_name(3, "p1") == "heatmaps/iter_000003-p1.png"
        assert out.events[0]["message"].startswith("module p1 snapshot 0")
    finally:
        runner.stop()


def test_new_fixation_is_not_judged_for_an_epsilon_greedy_policy():
    """Its greedy action wherever the argmax is constant is 'fixated' by design."""
    th = StateActionThresholds()
    prev = _snap(0, [100, 100, 100], [OK, OK, FIXATED], 50.0)
    fell = _snap(1, [100, 100, 100], [FIXATED, FIXATED, OK], 30.0, np.array([[20.0], [0.0], [10.0]], np.float32))
    assert [f.code for f in trend_findings([prev, fell], th)] == [C.NEW_FIXATION]
    assert trend_findings([prev, fell], th, learnt_confidence=False) == []
