"""No module of flow1_ray over MAX_MODULE_LINES lines and no function over MAX_FUNCTION_LINES,
unless a one-line reason stands beside it: ``# long module: <why>`` anywhere in the module,
``# long function: <why>`` on the line of its ``def`` or the line above it. A reason is read by
a person; this test only holds that one is written, and fails on a new long one without."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "flow1_ray"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
_REASON = re.compile(r"#\s*long (module|function):\s*\S")


def long_modules(root: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        n = text.count("\n")
        if n > MAX_MODULE_LINES and not any(m.group(1) == "module" for m in _REASON.finditer(text)):
            out.append(f"{path.relative_to(root.parent)}: {n} lines")
    return out


def long_functions(root: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().split("\n")
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            n = node.end_lineno - node.lineno + 1
            near = lines[max(0, node.lineno - 2):node.lineno]
            if n > MAX_FUNCTION_LINES and not any("long function:" in ln and _REASON.search(ln) for ln in near):
                out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: {n} lines")
    return out


def test_no_module_is_long_without_a_reason():
    assert long_modules() == []


def test_no_function_is_long_without_a_reason():
    assert long_functions() == []


def test_a_long_module_or_function_without_a_reason_is_found(tmp_path):
    root = tmp_path / "flow1_ray"
    root.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (root / "a.py").write_text("def f():\n" + body + "\n" + "\n" * MAX_MODULE_LINES)
    assert long_modules(root) == [f"flow1_ray/a.py: {MAX_MODULE_LINES + MAX_FUNCTION_LINES + 1} lines"]
    assert long_functions(root) == [f"flow1_ray/a.py:1 f: {MAX_FUNCTION_LINES + 1} lines"]
    (root / "a.py").write_text("# long module: a table of data\n# long function: one table\ndef f():\n" + body
                               + "\n" + "\n" * MAX_MODULE_LINES)
    assert long_modules(root) == [] and long_functions(root) == []
