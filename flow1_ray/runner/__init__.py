"""What runs inside each EnvRunner process: the agent that checks the env contract on live
samples (agent.py), the lock file and watchdog that make a death or hang visible to the
node's probe (liveness.py, lockdir.py), the state sampler for the heatmaps (states.py) and
the fire-and-forget sender to the hub (sender.py), and the share of episodes checked under
a time budget (budget.py). See docs/architecture.md."""
