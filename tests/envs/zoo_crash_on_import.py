"""An env module that segfaults when imported (a broken C extension loaded at import)."""

import ctypes

import zoo

ctypes.string_at(0)


class Env(zoo.Base):
    pass
