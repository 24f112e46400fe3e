"""The house rules of the package layout (docs/architecture.md), checked on the source."""

import ast
import re
from pathlib import Path

import pytest

from det_suite.models.catalog import MODELS, projections

PACKAGE = Path(__file__).resolve().parents[2] / "det_suite"
MAX_LINES = 500
SOURCES = sorted(PACKAGE.rglob("*.py"))
# Triton kernel files are exempt from the size rule (one kernel per file already).
SIZED = [p for p in SOURCES if not (p.parent.name == "kernels" and "triton.jit" in p.read_text())]


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


@pytest.mark.parametrize("path", SIZED, ids=_rel)
def test_no_module_over_500_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{_rel(path)} has {lines} lines; split it by what it holds"


CATALOG_PAIRS = sorted({(p.n, p.k) for model in MODELS for p in projections(model)})


def test_projection_shapes_are_written_only_in_the_catalog():
    """A model's (N, K) pairs come from models/catalog.py; nothing restates them."""
    pattern = re.compile("|".join(rf"\b{n}\s*[,x]\s*{k}\b" for n, k in CATALOG_PAIRS))
    found = [f"{_rel(p)}: {m.group(0)}" for p in SOURCES
             if p.name != "catalog.py" for m in pattern.finditer(p.read_text())]
    assert not found, found


def _environ_writes(tree: ast.AST) -> list[int]:
    """Lines that assign, delete, pop or setdefault an os.environ key."""
    lines = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Subscript) and "environ" in ast.unparse(target.value):
                lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("pop", "setdefault", "update") \
                and ast.unparse(node.func.value).endswith("os.environ"):
            lines.append(node.lineno)
    return lines


def test_the_interpreter_switch_is_thrown_in_one_module():
    owner = PACKAGE / "platform" / "interpreter.py"
    offenders = []
    for path in SOURCES:
        text = path.read_text()
        if path == owner or "INTERPRET" not in text:
            continue
        offenders += [f"{_rel(path)}:{line}" for line in _environ_writes(ast.parse(text))]
    assert not offenders, ("TRITON_INTERPRET is set outside det_suite/platform/interpreter.py: "
                           f"{offenders}")
    assert _environ_writes(ast.parse(owner.read_text())), "the owner no longer sets it"


def test_the_environment_scan_sees_a_write():
    """Positive control for the scan above."""
    tree = ast.parse("import os\nos.environ['TRITON_INTERPRET'] = '1'\n"
                     "os.environ.pop('TRITON_INTERPRET', None)\n")
    assert _environ_writes(tree) == [2, 3]
