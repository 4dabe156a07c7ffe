"""Checks of the learner's curves and gradients, read from RLlib's result dicts and flow1's
Learner tracing: entropy, KL, clip fraction, the value function, off-policy Q-values and the
replay buffer, exploration, the train/eval gap, per-layer gradients, the return's drop."""
