"""What flow1 adds to every EnvRunner process: its imports must stay light. scipy.stats alone
is ~54 MB of resident memory and ~0.5 s of CPU per process (measured: flow1's imports in a
runner went from 57 MB and 0.75 s to 4 MB and 0.07 s once the two rule files that only the
driver and the clusterer judge with imported it where they use it). Checked in a fresh
process: a real SingleAgentEnvRunner with Flow1Callbacks, sampled past its first judgement of
the checked episodes; the process joins the tests' Ray."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, resource, sys, tempfile, time, logging
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    before = set(sys.modules)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    from flow1_ray import Flow1Callbacks
    import flow1_ray.runner.agent
    print("import_mb", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024)
    print("stats_at_import", "scipy.stats" in set(sys.modules) - before)
    from flow1_ray.runner.agent import JUDGE_EVERY_S
    ray.init(log_to_driver=False, logging_level=logging.ERROR)   # the tests' Ray (RAY_ADDRESS)
    cb = Flow1Callbacks.with_options(output_dir=tempfile.mkdtemp(), print_events=False, sample_rate=1.0,
                                     check_budget=0)
    r = SingleAgentEnvRunner(config=PPOConfig().environment("CartPole-v1").callbacks(cb), worker_index=1)
    t0 = time.monotonic()
    while time.monotonic() - t0 < JUDGE_EVERY_S + 1.0:
        r.sample(num_timesteps=200)
    agent = next(a for c in r._callbacks for a in c._agents.values())
    print("judged", agent._judge_every > 0 and agent._last_judge > t0)
    print("stats_after_sampling", "scipy.stats" in set(sys.modules) - before)
    r.stop()
    ray.shutdown()
""")


def test_an_env_runner_with_flow1_never_imports_scipy_stats(attached_env):
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                         env=attached_env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert got["stats_at_import"] == "False" and got["judged"] == "True", out.stdout
    assert got["stats_after_sampling"] == "False", out.stdout
    assert float(got["import_mb"]) < 25.0, out.stdout   # 57 MB with scipy.stats, ~4 MB without
