"""What runs inside each EnvRunner process: the agent that checks the env contract on live
samples (agent.py), the share of episodes checked under a time budget (budget.py), the
opt-in live reward audit (reward_audit.py), the state sampler for the heatmaps (states.py)
and the fire-and-forget sender to the hub (sender.py). The runner's lock file, which makes a
death or a hang visible to its node's probe, is in flow1_ray.liveness."""
