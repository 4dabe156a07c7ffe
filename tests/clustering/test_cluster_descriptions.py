"""Clusters a person can read: each state cluster described in the env's own terms (the
features that set its centroid apart, in the observation's units, named from the space),
a thumbnail of a real frame for image envs, a 2-D map -- in clusters/, the heatmap's rows,
the findings, the report and the panel; old and damaged run directories still read."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gymnasium import spaces
from markupsafe import escape
from PIL import Image

from browser import Served, assert_no_alert, assert_not_blank, chrome, needs_browser, requested_urls, screenshot, \
    text, wait_for
from flow1_ray import analyze_state_actions
from flow1_ray.common import codes as C
from flow1_ray.hub.clusterer_core import ClustererCore
from flow1_ray.hub.recorder import RecorderCore
from flow1_ray.clustering.describe import describe, features, map_2d
from flow1_ray.clustering.frames import FRAMES_PER_SEND, thumbnails
from flow1_ray.clustering.heatmap import row_labels
from flow1_ray.clustering.features import flatten_observations
from flow1_ray.report.html import render_html
from flow1_ray.report.rundir import load_run_report
from flow1_ray.report.clusters import CLUSTER_CODES

EVIL = '<script>alert("cluster")</script><img src=x onerror="alert(2)">'


def names(space: spaces.Space) -> list[str]:
    return [f.name for f in features(space)]


# --- naming -----------------------------------------------------------------------------------
def test_feature_names_follow_the_observation_space_column_for_column():
    assert names(spaces.Box(-1, 1, (4,))) == ["obs[0]", "obs[1]", "obs[2]", "obs[3]"]
    assert names(spaces.Box(-1, 1, (2, 2))) == ["obs[0,0]", "obs[0,1]", "obs[1,0]", "obs[1,1]"]
    assert names(spaces.Discrete(3, start=1)) == ["obs=1", "obs=2", "obs=3"]
    space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "dir": spaces.Discrete(3), "mission": spaces.Text(5),
                         "t": spaces.Tuple([spaces.Box(0, 1, ()), spaces.MultiBinary(2)])})
    got = names(space)   # keys as gymnasium orders them; the text leaf has no columns
    assert got == ["dir=0", "dir=1", "dir=2", "pos[0]", "pos[1]", "t[0]", "t[1][0]", "t[1][1]"]
    assert len(got) == flatten_observations(
        {"pos": np.zeros((2, 2)), "dir": np.array([0, 2]), "mission": np.array(["a", "b"]),
         "t": (np.zeros(2), np.zeros((2, 2)))}, space).shape[1]


@pytest.mark.parametrize("space, bright, want", [
    (spaces.Box(0, 255, (32, 32, 3), np.uint8), (slice(8, 12), slice(20, 24), 1), "obs[y8:12,x20:24,c1]"),
    (spaces.Box(0, 255, (32, 32), np.uint8), (slice(28, 32), slice(0, 4)), "obs[y28:32,x0:4]"),
    (spaces.Box(0.0, 1.0, (3, 64, 64), np.float32), (2, slice(0, 8), slice(56, 64)), "obs[y0:8,x56:64,c2]"),
])
def test_an_image_column_is_named_by_the_pixels_its_pooled_block_averages(space, bright, want):
    """One bright block: the column pooling gives it is the one whose name says where it is."""
    frame = np.zeros(space.shape, space.dtype)
    frame[bright] = space.high.max()
    cols = flatten_observations(frame[None], space)[0]
    got = names(space)
    assert len(got) == len(cols) and got[int(cols.argmax())] == want


def test_a_description_names_the_features_that_set_a_centroid_apart_in_original_units():
    # standardised centroids; the states' mean 0.2 and spread 0.8 in obs[1]
    cart = ["cart position", "cart velocity", "pole angle", "pole angular velocity"]
    feats = [f for f in features(spaces.Box(-5, 5, (4,)))]
    from flow1_ray.clustering.describe import Feature

    named = [Feature(n, f.kind) for n, f in zip(cart, feats)]
    c = np.array([[0.1, 2.0, -1.25, 0.0], [-0.1, -2.0, 1.25, 0.0]])
    d0, d1 = describe(c, np.array([0.0, 0.2, 0.0, 1.0]), np.array([1.0, 0.8, 0.1, 2.0]), np.array([10, 10]), named)
    assert d0.text == "cart velocity ≈ +1.8 (mean 0.2, +2.0 sd); pole angle ≈ -0.125 (mean 0, -1.2 sd)"
    assert d0.label == "cart velocity≈+1.8 (+2.0sd), pole angle≈-0.12 (-1.2sd)"
    assert d1.text.startswith("cart velocity ≈ -1.4 (mean 0.2, -2.0 sd)")
    assert json.loads(d0.top_json())[0] == {"feature": "cart velocity", "kind": "value", "value": 1.8, "mean": 0.2,
                                            "sd": 2.0}
    near, = describe(np.zeros((1, 4)), 0.0, 1.0, np.array([5]))
    assert near.text == ("near the overall mean in every feature (none >= 0.5 sd off): obs[0] ≈ 0 (mean 0, +0.0 sd); "
                         "obs[1] ≈ 0 (mean 0, +0.0 sd); obs[2] ≈ 0 (mean 0, +0.0 sd)")
    assert near.label == "near the mean: obs[0]≈0 (+0.0sd), obs[1]≈0 (+0.0sd)" and near.top_json() == "[]"
    assert row_labels(np.array([120, 7]), [d0.label, ""]) == [f"0 (120)  {d0.label}", "1 (7)"]
    xy = map_2d(np.array([[0.0, 0, 0], [4, 0, 0], [0, 1, 0]]), np.ones(3))
    assert xy.shape == (3, 2) and abs(np.linalg.norm(xy[1] - xy[0]) - 4.0) < 1e-9   # distances kept


def test_offline_a_fixated_cluster_and_its_finding_say_which_states_it_holds():
    """Box(4) states: one group sits at obs[1] ~ 6 (the others around 0), always takes action
    0 and fails often: its ERROR_FIXATION names obs[1] and its value, in the observation's units."""
    rng = np.random.default_rng(0)
    n = 1500
    x = rng.normal(0, 1, (3 * n, 4)).astype(np.float32)
    x[:n, 1] = rng.normal(6.0, 0.1, n)
    x[n:2 * n, 3] += 8.0
    a = np.r_[np.zeros(n, int), rng.integers(0, 2, 2 * n)]
    fails = np.r_[rng.random(n) < 0.3, rng.random(2 * n) < 0.02]
    m = analyze_state_actions(x, a, spaces.Discrete(2), n_clusters=3, backend="sklearn",
                              observation_space=spaces.Box(-10, 10, (4,)), failures=fails)
    (i,) = [j for j, v in enumerate(m.verdicts) if v == C.ERROR_FIXATION]
    top = json.loads(m.to_arrow().column("top_features")[i].as_py())
    assert top[0]["feature"] == "obs[1]" and abs(top[0]["value"] - x[:n, 1].mean()) < 0.05
    assert abs(top[0]["mean"] - x[:, 1].mean()) < 1e-3 and top[0]["sd"] > 1.0
    want = f"obs[1] ≈ {top[0]['value']:+.3g} (mean {top[0]['mean']:.3g}, {top[0]['sd']:+.1f} sd)"
    assert m.descriptions[i].text.startswith(want)
    (event,) = [e for e in m.to_events() if e.code == C.ERROR_FIXATION]
    assert event.message.startswith(f"cluster {i} (obs[1]≈{top[0]['value']:+.2g} ({top[0]['sd']:+.1f}sd)")
    assert event.evidence["description"] == m.descriptions[i].text
    snap = m.snapshot_events(snapshot=0, warn={C.ERROR_FIXATION})
    fix = next(e for e in snap if e.code == C.ERROR_FIXATION)
    assert fix.evidence["described"] == {str(i): m.descriptions[i].label} and m.descriptions[i].label in fix.message


def test_offline_a_dict_observation_is_described_by_its_keys():
    rng = np.random.default_rng(1)
    n = 800
    space = spaces.Dict({"pos": spaces.Box(-5, 5, (2,)), "dir": spaces.Discrete(3)})
    obs = {"pos": np.r_[np.c_[rng.normal(0, 0.1, n), rng.normal(4, 0.1, n)], rng.normal(0, 0.1, (n, 2))],
           "dir": np.r_[np.full(n, 2), rng.integers(0, 2, n)]}
    m = analyze_state_actions(obs, np.zeros(2 * n, int), spaces.Discrete(2), n_clusters=2, backend="sklearn",
                              observation_space=space)
    i = int(np.argmax([max(s.value for s in d.standouts if s.name == "dir=2") for d in m.descriptions]))
    assert m.descriptions[i].text.startswith("dir=2 in 100% of its states (overall 50%)")
    assert "pos[1] ≈ +4" in m.descriptions[i].text and "pos[0]" not in m.descriptions[i].text


# --- images ----------------------------------------------------------------------------------------
def quadrant_frames(rng, quadrants, side: int = 32, channels: int = 0) -> np.ndarray:
    """Frames whose state is a bright square in one quadrant (0 top-left, 1 top-right, 2
    bottom-left, 3 bottom-right) over dim noise."""
    shape = (len(quadrants), side, side) + ((channels,) if channels else ())
    f = rng.integers(0, 40, shape).astype(np.uint8)
    h = side // 2
    for i, q in enumerate(quadrants):
        f[i, (q // 2) * h: (q // 2) * h + h, (q % 2) * h: (q % 2) * h + h] = 220
    return f


def bright_quadrant(picture: np.ndarray) -> int:
    h, w = picture.shape[0] // 2, picture.shape[1] // 2
    return int(np.argmax([picture[(q // 2) * h:(q // 2 + 1) * h, (q % 2) * w:(q % 2 + 1) * w].mean()
                          for q in range(4)]))


def quadrant_of(name: str, side: int) -> int:
    """The quadrant of a pooled block's name: ``obs[y8:12,x20:24]``."""
    y, x = (int(v) for v in re.search(r"\[y(\d+):\d+,x(\d+):", name).groups())
    return 2 * (y >= side // 2) + (x >= side // 2)


def test_offline_image_clusters_get_a_thumbnail_of_a_real_frame_and_say_where_they_differ():
    rng = np.random.default_rng(0)
    q = rng.integers(0, 4, 2000)
    m = analyze_state_actions(quadrant_frames(rng, q), q % 2, spaces.Discrete(2), n_clusters=4, backend="sklearn",
                              observation_space=spaces.Box(0, 255, (32, 32), np.uint8))
    assert len(m.thumbnails) == 4 and all(t is not None for t in m.thumbnails)
    seen = set()
    for i, png in enumerate(m.thumbnails):
        img = Image.open(io.BytesIO(png))
        assert img.format == "PNG" and img.mode == "L" and img.size == (32, 32)
        where = bright_quadrant(np.asarray(img))
        assert quadrant_of(m.descriptions[i].standouts[0].name, 32) == where, m.descriptions[i].text
        assert m.descriptions[i].standouts[0].sd > 0 and m.descriptions[i].standouts[0].value > 150
        seen.add(where)
    assert seen == {0, 1, 2, 3}
    assert m.to_arrow().column("thumbnail").to_pylist() == m.thumbnails


def test_thumbnails_are_small_and_follow_the_frames_layout():
    rng = np.random.default_rng(0)
    rgb = quadrant_frames(rng, [3], side=96, channels=3)
    t = thumbnails(rgb, spaces.Box(0, 255, (96, 96, 3), np.uint8))
    assert t.shape == (1, 48, 48, 3) and t.dtype == np.uint8 and bright_quadrant(t[0]) == 3
    stacked = np.moveaxis(np.stack([quadrant_frames(rng, [k], side=84)[0] for k in range(4)], -1), -1, 0)[None]
    t = thumbnails(stacked.astype(np.float32) / 255.0, spaces.Box(0.0, 1.0, (4, 84, 84), np.float32))
    assert t.shape == (1, 42, 42, 1) and bright_quadrant(t[0, ..., 0]) == 3   # the newest frame of the stack


def _episodes(rng, per_quadrant: int, side: int = 96):
    """Real RLlib episodes of an image env whose state is a quadrant: in quadrant 0 the
    policy always takes action 0 and the episode ends early by termination (a fixation that
    fails), in quadrant 1 it acts at random, elsewhere mostly action 0."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    obs_space = spaces.Box(0, 255, (side, side, 3), np.uint8)
    eps = []
    for q in range(4):
        for _ in range(per_quadrant):
            n = 5 if q == 0 else 25
            frames = quadrant_frames(rng, [q] * (n + 1), side, 3)
            acts = np.zeros(n, int) if q == 0 else rng.integers(0, 2, n) if q == 1 else (rng.random(n) < 0.3)
            ep = SingleAgentEpisode(observations=list(frames), actions=[int(v) for v in acts], rewards=[1.0] * n,
                                    terminated=q == 0, len_lookback_buffer=0, observation_space=obs_space,
                                    action_space=spaces.Discrete(2))
            eps.append(ep.to_numpy())
    return obs_space, eps


def _image_run(tmp_path, sends: int = 6):
    """A run directory written by the real parts: the runner's sampler on real episodes,
    the clusterer and the Recorder (no Ray): returns (run_dir, the snapshot, the batches)."""
    from flow1_ray.runner.sender import Sender
    from flow1_ray.runner.states import StateSampler

    rng = np.random.default_rng(0)
    obs_space, eps = _episodes(rng, 6)
    sampler = StateSampler(obs_space, spaces.Discrete(2), 1.0, Sender("runner/states", lambda: None, 1), seed=3)
    # two snapshots, and a 5 % share: a verdict is a WARN (a flagged cluster) once its clusters hold
    # state_warn_share of the states at each of the last state_warn_snapshots (2) snapshots; the
    # fixated corner holds 6 % here (the default 10 % would leave it informational)
    core = ClustererCore(n_clusters=4, backend="sklearn", thresholds={"state_warn_share": 0.05})
    batches = []
    for k in range(sends):
        if k == sends // 2:
            core.compute_snapshot(iteration=1, return_mean=5.0)
        sampler.add(eps)
        b = sampler.batch()["modules"]["default_policy"]
        for st in sampler.streams.values():   # what a delivered send does (maybe_send)
            st.chunks = []
        sampler.buffered = 0
        batches.append(b)
        assert core.ingest_rows(b["x"], b["a"], b["fail"], b["labels"], b["policy"], None, b["features"],
                                b["frames"])
    out = core.compute_snapshot(iteration=2, return_mean=5.0)
    rec = RecorderCore(str(tmp_path), "image-run", flush_interval_s=3600)
    rec.add_snapshot(out.payload())
    rec.flush()
    assert rec.heatmaps.drain(60)
    rec.close()
    return tmp_path, out, batches, eps


def test_a_runner_sends_a_few_downscaled_frames_and_the_clusters_get_thumbnails_of_their_states(tmp_path):
    run, out, batches, eps = _image_run(tmp_path)
    b = batches[0]
    # the runner: every taken row's features, the columns' names, a few frames downscaled
    assert b["x"].shape == (sum(len(e) for e in eps), 8 * 8 * 3) and len(b["features"]) == 8 * 8 * 3
    assert b["features"][0] == ("obs[y0:12,x0:12,c0]", "pixel")
    fx, img = b["frames"]["x"], b["frames"]["img"]
    assert img.shape == (FRAMES_PER_SEND, 48, 48, 3) and img.dtype == np.uint8
    frames = np.concatenate([e.get_observations()[:-1] for e in eps])   # the frames of the taken rows, in order
    for row, pic in zip(fx, img):   # each thumbnail is the real frame of the row it came with
        (j,) = np.flatnonzero((b["x"] == row).all(1))[:1]
        assert np.array_equal(pic, thumbnails(frames[j:j + 1], spaces.Box(0, 255, (96, 96, 3), np.uint8))[0])
    # the clusterer: each cluster's thumbnail is a state of it, the description says where it is bright
    rows = out.rows.to_pylist()
    assert all(r["thumbnail"] is not None and r["description"] for r in rows)
    for r in rows:
        pic = np.asarray(Image.open(io.BytesIO(r["thumbnail"])))
        assert pic.shape == (48, 48, 3)
        assert quadrant_of(json.loads(r["top_features"])[0]["feature"], 96) == bright_quadrant(pic), r["description"]
    verdicts = {bright_quadrant(np.asarray(Image.open(io.BytesIO(r["thumbnail"])))): r["verdict"] for r in rows}
    assert verdicts[0] == C.ERROR_FIXATION and verdicts[1] == C.CHAOS, verdicts
    assert out.heatmap["descriptions"] == [r["label"] for r in rows]
    # the report: each flagged cluster's description and its thumbnail, embedded
    report = load_run_report(run)
    page = render_html(report, run)
    warned = {e.code for e in report.events if e.code in CLUSTER_CODES and e.status != C.PASS}
    assert C.ERROR_FIXATION in warned, [(e.code, e.status) for e in report.events]
    flagged = [r for r in rows if r["verdict"] in warned]
    shown = re.findall(r'<img class="thumb" alt="a state of cluster (\d+)" src="data:image/png;base64,([^"]+)"', page)
    assert sorted(int(c) for c, _ in shown) == sorted(r["cluster"] for r in flagged)
    for c, data in shown:
        assert base64.b64decode(data) == rows[int(c)]["thumbnail"]
    for r in flagged:
        assert escape(r["description"]) in page
    described = report.summary["state_actions"]["described"]
    assert {d["cluster"] for d in described} == {r["cluster"] for r in flagged} and all(d["thumbnail"]
                                                                                         for d in described)
    assert 'class="clustermap"' in page
    fix = next(e for e in report.events if e.code == C.ERROR_FIXATION)
    (i,) = [r["cluster"] for r in rows if r["verdict"] == C.ERROR_FIXATION]
    assert f"cluster {i} ({rows[i]['label']})" in fix.message


# --- untrusted run directories -------------------------------------------------------------------
OLD_COLUMNS = ("module", "snapshot", "iteration", "cluster", "size", "action_counts", "p_action", "failures",
               "policy_entropy", "policy_top_p", "verdict")


def _blob_map():
    from state_blobs import blobs

    x, a, f, _ = blobs(per=300)
    return analyze_state_actions(x, a, spaces.Discrete(6), n_clusters=6, backend="sklearn", failures=f)


def _run_with_clusters(run, tables: list[pa.Table], m=None) -> None:
    """The tables as the run's clusters/ parts; with ``m`` (the map they came from), its
    snapshot's events too, every verdict a WARN (a decided policy's, as a live run raises them)."""
    rec = RecorderCore(str(run), "run", flush_interval_s=3600)
    rec.add_events([] if m is None else m.snapshot_events(snapshot=0, iteration=3, warn=set(CLUSTER_CODES),
                                                          module="default_policy"))
    rec.flush()
    rec.close()
    (run / "clusters").mkdir(exist_ok=True)
    for i, t in enumerate(tables):
        pq.write_table(t, run / "clusters" / f"part-{i:020d}-0.parquet")


def test_a_run_written_before_descriptions_still_reads_and_shows_its_clusters_by_number(tmp_path):
    from flow1_ray.report.panel_callbacks import REFRESH_OUTPUTS, Runs, panel_callbacks

    m = _blob_map()
    old = m.to_arrow(snapshot=0, iteration=3, module="default_policy").select(list(OLD_COLUMNS))
    _run_with_clusters(tmp_path, [old], m)
    report = load_run_report(tmp_path)
    assert report.skipped == [] and "described" not in report.summary["state_actions"]
    page = render_html(report, tmp_path)
    assert "(not recorded: a run written before cluster descriptions)" in page and 'class="clustermap"' not in page
    assert "## State clusters x actions" in report.to_markdown()
    _, refresh = panel_callbacks(Runs(tmp_path))
    drawn = dict(zip(REFRESH_OUTPUTS, refresh(1, tmp_path.name, None)))
    assert not str(drawn["updated"]).startswith("not redrawn") and "not recorded" in str(drawn["clusters"])


def test_damaged_description_columns_are_named_and_hostile_text_stays_text(tmp_path):
    from flow1_ray.report.panel_callbacks import REFRESH_OUTPUTS, Runs, panel_callbacks

    m = _blob_map()
    t = m.to_arrow(snapshot=0, iteration=3, module="default_policy")
    flagged = [i for i, v in enumerate(t.column("verdict").to_pylist()) if v in CLUSTER_CODES]
    desc = t.column("description").to_pylist()
    desc[flagged[0]] = EVIL
    thumbs = [b"\x89PNG\r\n\x1a\n" + b"x" * 100_000 if i == flagged[0] else b"<svg onload=alert(3)>" if i == flagged[1]
              else None for i in range(t.num_rows)]
    hostile = t.set_column(t.column_names.index("description"), "description", pa.array(desc, pa.string())) \
        .set_column(t.column_names.index("thumbnail"), "thumbnail", pa.array(thumbs, pa.binary()))
    foreign = t.set_column(t.column_names.index("map_x"), "map_x", pa.array(["left"] * t.num_rows)) \
        .set_column(t.column_names.index("snapshot"), "snapshot", pa.array([1] * t.num_rows, pa.int64()))
    _run_with_clusters(tmp_path, [hostile], m)
    report = load_run_report(tmp_path)
    assert report.skipped == ["clusters: 2 thumbnail(s) that are not PNGs of <= 65536 bytes left out"]
    page = render_html(report, tmp_path)
    assert escape(EVIL) in page and EVIL not in page and "onload" not in page
    assert not re.findall(r'<img class="thumb"', page)
    md = report.to_markdown()
    assert "<script>" not in md and '&lt;script&gt;alert("cluster")' in md
    # a part whose map_x is text: its columns cannot merge with the other's, so that part is named
    pq.write_table(foreign, tmp_path / "clusters" / "part-00000000000000000009-0.parquet")
    report = load_run_report(tmp_path)
    assert any(s.startswith("clusters/part-00000000000000000009-0.parquet") or "map_x" in s for s in report.skipped), \
        report.skipped
    render_html(report, tmp_path)
    _, refresh = panel_callbacks(Runs(tmp_path))
    drawn = dict(zip(REFRESH_OUTPUTS, refresh(1, tmp_path.name, None)))
    assert not str(drawn["updated"]).startswith("not redrawn"), drawn["updated"]


@needs_browser
def test_the_panel_shows_what_the_flagged_clusters_hold_as_text_with_their_thumbnails(tmp_path, cli_env):
    run, out, _, _ = _image_run(tmp_path / "20260101-000000-imgrun")
    # a hostile description in a later part of the same snapshot's module
    t = out.rows
    desc = t.column("description").to_pylist()
    warned = {e.code for e in load_run_report(run).events if e.code in CLUSTER_CODES and e.status != C.PASS}
    flagged = [i for i, v in enumerate(t.column("verdict").to_pylist()) if v in warned]
    assert flagged
    desc[flagged[0]] = f"{desc[flagged[0]]} {EVIL}"
    pq.write_table(t.set_column(t.column_names.index("description"), "description", pa.array(desc))
                   .set_column(t.column_names.index("iteration"), "iteration", pa.array([3] * t.num_rows, pa.int64())),
                   run / "clusters" / "part-99999999999999999999-0.parquet")
    # ... a snapshot at iteration 3, whose verdicts were raised as at iteration 2
    rec = RecorderCore(str(run), "image-run", flush_interval_s=3600)
    rec.add_events([dataclasses.replace(e, iteration=3) for e in load_run_report(run).events
                    if e.code in warned and e.status != C.PASS])
    rec.flush()
    rec.close()
    with Served(run, env=cli_env) as served:
        d = chrome()
        try:
            d.get(served.url)
            assert wait_for(lambda: "what the flagged clusters of default_policy hold" in text(d, "clusters"), 20)
            shown = text(d, "clusters")
            assert EVIL in shown, "the hostile description is shown as text"
            for i in flagged:
                assert desc[i] in shown
            thumbs = d.find_elements("css selector", "#clusters img.thumb")
            assert len(thumbs) == len(flagged)
            assert all(d.execute_script("return arguments[0].naturalWidth", i) == 48 for i in thumbs)
            assert wait_for(lambda: d.find_elements("css selector", "#cluster-map-0 .main-svg"), 10)
            assert not d.find_elements("css selector", "img[src='x']")
            assert_no_alert(d)
            assert all(u.startswith((served.url, "data:")) for u in requested_urls(d))
            assert_not_blank(screenshot(d, "panel-clusters", tmp_path))
        finally:
            d.quit()


# --- a real run ----------------------------------------------------------------------------------
