"""What-if branches: a run's advice tested by running it (``flow1 whatif``).

:mod:`.plan` fixes what runs and what each branch is judged on, :mod:`.branch` runs one
branch in a Ray task (restore, read the knobs back, train), :mod:`.verdict` holds the
statistic, :mod:`.run` ties them together and writes ``RUN_DIR/whatif/<id>/``.
"""
