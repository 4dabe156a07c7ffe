"""Checks of the states the agent visits: what P(action | state cluster) says about where
the agent is lost."""
