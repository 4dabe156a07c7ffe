"""Errors a user caused (bad env id, bad import path, unreadable run dir...).

The CLI turns a :class:`Flow1InputError` into one line on stderr and exit code 2; anything
else is a bug of flow1 and keeps its traceback.
"""


class Flow1InputError(Exception):
    """Bad input from the user: the message is the whole story, no traceback needed."""
