"""A driver that can never finish building: APPO with 2 EnvRunners and a Learner actor on a
2-CPU cluster (the runners hold both CPUs, the Learner waits forever). Run as a subprocess
against the tests' Ray (RAY_ADDRESS); argv[1] is flow1's output directory."""

import os
import sys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from ray.rllib.algorithms.appo import APPOConfig  # noqa: E402

from flow1_ray import Flow1Callbacks  # noqa: E402

ray.init(log_to_driver=False)
cb = Flow1Callbacks.with_options(output_dir=sys.argv[1], print_events=False, state_actions=False)
config = (APPOConfig().environment("CartPole-v1").callbacks(cb)
          .env_runners(num_env_runners=2).learners(num_learners=1))
print("building", flush=True)
config.build_algo()
print("built", flush=True)   # never reached on 2 CPUs
