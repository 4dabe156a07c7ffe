"""The run directory: its files written once and read back as untrusted input (store.py,
reading.py), what it says about the run itself (runrecord.py), and the capture of Ray's own
output into its ``ray.log`` (raylog.py). Any process reads it without Ray."""
