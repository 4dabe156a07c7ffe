"""Checks of an env's contract, judged on the values it returns: the spaces, reset and step,
observations, actions and masks, rewards and the reward's logic, multi-agent envs. The same
functions judge ``flow1 check`` and live EnvRunner samples."""
