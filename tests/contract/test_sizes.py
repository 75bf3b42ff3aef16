"""The sizes the project set itself (issue 38): no module of the package over 650 lines, no
function over 80, and `engine/` (the daemon alone) at most 13,000 lines. Checked here so that a
change that crosses one fails in CI, not in a later review."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gpudesk"
MAX_FILE_LINES = 650
MAX_FUNCTION_LINES = 80
MAX_ENGINE_LINES = 13_000


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_650_lines() -> None:
    lines = {str(p.relative_to(PACKAGE)): line_count(p) for p in modules()}
    over = {name: n for name, n in lines.items() if n > MAX_FILE_LINES}
    assert not over, f"modules over {MAX_FILE_LINES} lines: {over}"


def test_no_function_is_over_80_lines() -> None:
    over = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    over[f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"] = length
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"


def test_the_daemon_package_stays_within_13000_lines() -> None:
    engine = sum(line_count(p) for p in modules() if p.relative_to(PACKAGE).parts[0] == "engine")
    assert engine <= MAX_ENGINE_LINES, f"engine/ holds {engine} lines"


def test_the_checks_see_the_package() -> None:
    # A walk that found nothing would pass every check above.
    assert len(modules()) > 200
    assert any(p.name == "daemon.py" for p in modules())
