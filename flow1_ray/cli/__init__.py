"""The ``flow1`` command: its parser (parser.py), the commands (main.py), ``flow1 train`` (train.py)
and ``flow1 diagnose`` (diagnose.py). Each command imports what it needs when it runs."""
