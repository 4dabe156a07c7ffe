"""State clustering without Ray: KMeans backends (backends.py), the streaming layer
(streaming.py) and the state-cluster x action map (state_action_map.py). Import from the
submodules; this package imports nothing eagerly, so that ``backends`` stays light."""
