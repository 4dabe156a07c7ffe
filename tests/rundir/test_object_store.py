"""Run directories on object storage: ``output_dir="s3://bucket/prefix?..."`` through
``pyarrow.fs``, against a real S3 endpoint on loopback (moto's standalone server). The
Recorder writes there from the hub, and ``load_events`` / ``flow1 report`` read it back."""

from __future__ import annotations

from flow1_ray.common import codes as C
from flow1_ray.common.events import Event
from flow1_ray.rundir.reading import load_events
from flow1_ray.rundir.store import Location, write_events


def _under(uri: str, *names: str) -> str:
    loc = Location(uri)
    for n in names:
        loc = loc / n
    return str(loc)


def test_a_location_keeps_the_uri_options_and_joins_the_path():
    loc = Location("s3://b/p?endpoint_override=h:1&scheme=http") / "run1" / "events"
    assert str(loc) == "s3://b/p/run1/events?endpoint_override=h:1&scheme=http" and loc.name == "events"
    assert not loc.local and Location("/tmp/x").local and str(Location("file:///tmp/x")) == "/tmp/x"


def test_events_and_a_report_round_trip_through_s3(s3_uri):
    from flow1_ray.report.model import Report
    from flow1_ray.report.rundir import load_run_report

    run = _under(s3_uri, "offline-1")
    ev = Event(C.REWARD_NAN, "reward nan at step 3", {"step": 3})
    write_events([ev], run)
    write_events([Event(C.CHECKS_PASSED, "fine", {}, module=C.ENV_SPEC)], run)
    table = load_events(run)
    assert table.num_rows == 2 and set(table.column("code").to_pylist()) == {C.REWARD_NAN, C.CHECKS_PASSED}
    assert (Location(run) / "flow1.log").read_text().count("\n") == 2   # appended, on an object store
    Report(target="offline", events=[ev]).write_summary(run)
    back = load_run_report(run)
    assert back.status == C.FAIL and (Location(run) / "report.json").is_file()


def test_the_panels_follower_reads_a_run_on_s3_as_it_grows(s3_uri):
    """flow1 serve on a URI: the runs under a prefix are found and each poll reads only the
    parts written since the last one."""
    from flow1_ray.hub.recorder import RecorderCore
    from flow1_ray.report import follow
    from flow1_ray.report.follow import RunFollower, find_runs

    run = _under(s3_uri, "served", "20260101-000000-aaaaaa")
    rec = RecorderCore(run, "run-s3")
    rec.add_events([Event(C.REWARD_NAN, "reward nan at step 3", {"step": 3})])
    rec.add_metrics({"iteration": 1, "env_steps": 100, "episode_return_mean": 1.5})
    rec.flush()
    assert [r.name for r in find_runs(_under(s3_uri, "served"))] == ["20260101-000000-aaaaaa"]
    f = RunFollower(run)
    assert f.poll() and f.counts[C.FAIL] == 1 and f.last_metrics()["episode_return_mean"] == 1.5
    rec.add_metrics({"iteration": 2, "env_steps": 200, "episode_return_mean": 2.5})
    rec.flush()
    f._polled_at -= follow.MIN_POLL_INTERVAL_S
    assert f.poll() and f.last_metrics()["iteration"] == 2 and f.stamps == {"events": 1, "metrics": 2}


