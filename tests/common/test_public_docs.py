"""Every public function and public method of flow1's public API (``flow1_ray.__all__``) has
an ``Args:`` section naming each of its parameters."""

from __future__ import annotations

import inspect
import re
from typing import Callable

import flow1_ray

_SECTION = re.compile(r"^([A-Z][A-Za-z ]*):\s*$")


def _params(func: Callable) -> list[str]:
    """The parameters a caller passes, self/cls aside (``*args``/``**kwargs`` by their bare names)."""
    return [p for p in inspect.signature(func).parameters if p not in ("self", "cls")]


def _undocumented(func: Callable) -> list[str]:
    """The parameters of ``func`` that its docstring's ``Args:`` section does not name, each as
    ``name:`` or ``name (type):`` at the start of a line inside that section."""
    lines = (inspect.getdoc(func) or "").splitlines()
    named: set[str] = set()
    inside, indent = False, None
    for line in lines:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if inside and depth == 0 and _SECTION.match(line):
            inside = False
        if line.strip() == "Args:" and depth == 0:
            inside, indent = True, None
            continue
        if inside:
            indent = depth if indent is None else indent
            m = re.match(r"\*{0,2}(\w+)\s*(\([^)]*\))?:", line.strip())
            if depth == indent and m:
                named.add(m.group(1))
    return [p for p in _params(func) if p not in named]


def _in_scope() -> dict[str, Callable]:
    """Each exported function, and each public method, classmethod and staticmethod defined in
    the body of an exported class (no property, nothing a dataclass generated) that takes a
    parameter besides self/cls."""
    out: dict[str, Callable] = {}
    for name in flow1_ray.__all__:
        if name == "__version__":
            continue
        obj = getattr(flow1_ray, name)
        if inspect.isfunction(obj):
            out[name] = obj
        elif inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_"):   # a dataclass' generated methods are all dunders
                    continue
                if isinstance(value, (classmethod, staticmethod)):
                    value = value.__func__
                if inspect.isfunction(value):
                    out[f"{name}.{attr}"] = value
    return {k: f for k, f in out.items() if _params(f)}


def test_every_public_function_documents_its_args():
    functions = _in_scope()
    assert "check_env" in functions and "Report.exit_code" in functions and "Thresholds.from_file" in functions
    missing = {name: params for name, f in sorted(functions.items()) if (params := _undocumented(f))}
    assert not missing, "no Args: entry for: " + "; ".join(f"{n} {p}" for n, p in missing.items())


def test_a_missing_arg_is_found():
    def planted(first: int, second: str = "", *rest: int, **options: float) -> None:
        """Planted, one parameter short.

        Args:
            first: a number.
            second (str): a name, written over
                two lines; third: is not an entry.
            *rest: more numbers.

        Raises:
            options: an entry of another section.
        """

    assert _undocumented(planted) == ["options"]
    planted.__doc__ = "Planted, without an Args section (first: is not one)."
    assert _undocumented(planted) == ["first", "second", "rest", "options"]
