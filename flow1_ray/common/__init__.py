"""What every process and every layer of flow1 shares, importing nothing else of flow1:
the codes, statuses and report modules (codes.py, its code table generated from the rule
files), the event model (events.py), the names a second process relies on (schema.py: the
run directory's tables and columns, the result keys; names.py: the actors' names and Ray KV
keys), one iteration's counts as the hub and the driver agree on them (iteration.py), and
the error a user's bad input raises (errors.py)."""
