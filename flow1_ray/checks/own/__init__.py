"""Findings about flow1 itself: a watcher that went blind or an internal error (watchers),
a check rate or a snapshot spacing lowered to hold flow1's cost budget (budgets), and the
actions flow1 took for the user (actions: snapshots, guards, live what-ifs)."""
