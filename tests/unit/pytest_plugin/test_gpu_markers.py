"""Every test that names a CUDA device carries a det-suite GPU marker.

A test that hard-codes CUDA (``"cuda"``, ``device="cuda"``, ``"cuda:0"``, ``x.cuda()``, a
``torch.cuda.*`` call) but carries no GPU marker is invisible to the plugin: on a CPU
runner it errors or hides behind its own skipif instead of being reported as "not run",
and ``--det-require=gpu`` never knows it exists. This file reads the test sources with
`ast` (nothing is imported or run) and names every such test.

A test is marked when the function, an enclosing class (decorator or ``pytestmark``), or
the module's ``pytestmark`` carries one of `det_suite.pytest_plugin.markers.GPU_MARKERS`; a
CUDA literal inside ``pytest.param(..., marks=<GPU marker>)`` is marked by that param. Tests
that take their device from the ``device`` fixture name no literal and are fine. Queries
that answer without a GPU (``torch.cuda.is_available()`` and friends) are not uses.
Only the test function's own source (decorators included) is read, not helpers it calls.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from det_suite.pytest_plugin.markers import GPU_MARKERS

TESTS_ROOT = Path(__file__).resolve().parents[2]
# torch.cuda calls that work, and answer, on a machine without a GPU.
CUDA_QUERIES = frozenset({"is_available", "device_count", "is_initialized"})
# Calls whose second argument names an attribute (`monkeypatch.setattr(torch.version,
# "cuda", None)`): that "cuda" is an attribute's name, not a device.
ATTRIBUTE_CALLS = frozenset({"setattr", "getattr", "delattr", "hasattr"})


@dataclass(frozen=True)
class CudaTest:
    """A test function whose source uses CUDA, and whether a GPU marker covers it."""

    nodeid: str
    line: int
    use: str  # the first use, e.g. 'device="cuda" at line 12'
    marked: bool


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _selection_only(node: ast.AST) -> bool:
    """A mark called with hardware=False selects without requiring: it skips nothing."""
    return isinstance(node, ast.Call) and any(
        kw.arg == "hardware" and isinstance(kw.value, ast.Constant) and kw.value.value is False
        for kw in node.keywords)


def _marker_names(node: ast.AST | None) -> set[str]:
    """Marker names an expression applies: pytest.mark.NAME, mark.NAME, called or not
    (a selection-only ``NAME(hardware=False)`` applies no requirement, so it is left out)."""
    if node is None:
        return set()
    names = set()
    selection_only = {id(sub.func) for sub in ast.walk(node) if _selection_only(sub)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and id(sub) not in selection_only:
            owner = sub.value
            if (isinstance(owner, ast.Attribute) and owner.attr == "mark") or \
                    (isinstance(owner, ast.Name) and owner.id == "mark"):
                names.add(sub.attr)
    return names


def _pytestmark(body: list[ast.stmt]) -> set[str]:
    names = set()
    for statement in body:
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) \
                else [statement.target]
            if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
                names |= _marker_names(statement.value)
    return names


def _is_gpu_marked_param(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and _dotted(node.func) in ("pytest.param", "param")):
        return False
    marks = next((kw.value for kw in node.keywords if kw.arg == "marks"), None)
    return bool(_marker_names(marks) & set(GPU_MARKERS))


def _is_cuda_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        (node.value == "cuda" or node.value.startswith("cuda:"))


def _cuda_use(node: ast.AST) -> str | None:
    if _is_cuda_string(node):
        return f'"{node.value}" at line {node.lineno}'
    if isinstance(node, ast.keyword) and node.arg == "device" and _is_cuda_string(node.value):
        return f'device="{node.value.value}" at line {node.lineno}'
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
            return f".cuda() at line {node.lineno}"
        name = _dotted(node.func) or ""
        if name.startswith("torch.cuda.") and name.rsplit(".", 1)[1] not in CUDA_QUERIES:
            return f"{name}() at line {node.lineno}"
    return None


def _falls_back_to_the_cpu(node: ast.AST) -> bool:
    """An `a if test else b` choosing between a CUDA and a non-CUDA device string by asking
    torch whether CUDA is available."""
    if not isinstance(node, ast.IfExp):
        return False
    branches = [node.body, node.orelse]
    asks = any(isinstance(n, ast.Call) and _dotted(n.func) == "torch.cuda.is_available"
               for n in ast.walk(node.test))
    return asks and any(_is_cuda_string(b) for b in branches) and \
        any(isinstance(b, ast.Constant) and not _is_cuda_string(b) for b in branches)


def _first_cuda_use(function: ast.AST) -> str | None:
    """The first CUDA use in a test's decorators and body, skipping GPU-marked params."""
    pending = [*getattr(function, "decorator_list", []), *function.body]
    found = []
    while pending:
        node = pending.pop()
        if _is_gpu_marked_param(node):
            continue
        if isinstance(node, ast.Call) and len(node.args) >= 2 and \
                (_dotted(node.func) or "").rsplit(".", 1)[-1] in ATTRIBUTE_CALLS:
            pending.extend([node.func, node.args[0], *node.args[2:], *node.keywords])
            continue
        if _falls_back_to_the_cpu(node):
            # `"cpu" if ... not torch.cuda.is_available() else "cuda"`: the device is chosen
            # at run time and the test runs anywhere, like one taking the `device` fixture.
            pending.append(node.test)
            continue
        if (use := _cuda_use(node)) is not None:
            found.append((node.lineno, use))
        pending.extend(ast.iter_child_nodes(node))
    # keyword-argument uses read better than the bare string inside them
    found.sort(key=lambda item: (item[0], not item[1].startswith("device=")))
    return found[0][1] if found else None


def scan(source: str, path: str) -> list[CudaTest]:
    """Every test function in `source` that uses CUDA, marked or not."""
    module = ast.parse(source, filename=path)
    gpu = set(GPU_MARKERS)
    found = []

    def visit(body, prefix: str, inherited: set[str]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.name.startswith("test"):
                use = _first_cuda_use(node)
                if use is not None:
                    markers = inherited | _marker_names(ast.Tuple(node.decorator_list))
                    found.append(CudaTest(f"{prefix}::{node.name}", node.lineno, use,
                                          bool(markers & gpu)))
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                markers = inherited | _marker_names(ast.Tuple(node.decorator_list)) \
                    | _pytestmark(node.body)
                visit(node.body, f"{prefix}::{node.name}", markers)

    visit(module.body, path, _pytestmark(module.body))
    return found


def scan_tree(root: Path = TESTS_ROOT) -> list[CudaTest]:
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent).as_posix()
        found += scan(path.read_text(encoding="utf-8"), relative)
    return found


# ------------------------------------------------------------------ the tree

def test_every_test_using_cuda_carries_a_gpu_marker():
    unmarked = [test for test in scan_tree() if not test.marked]
    assert not unmarked, (
        f"{len(unmarked)} test(s) use CUDA but carry none of the GPU markers "
        f"({', '.join(GPU_MARKERS)}), so the plugin cannot skip or count them:\n"
        + "\n".join(f"  {t.nodeid} (line {t.line}): uses {t.use}" for t in unmarked)
        + "\nmark each (e.g. @pytest.mark.gpu), or take the device from the `device` fixture")


def test_scan_of_the_tree_sees_a_known_cuda_test():
    # Positive control on real files: a scan that read nothing would pass the check above.
    seen = {test.nodeid: test for test in scan_tree()}
    known = "tests/unit/ops/test_ops_validation.py::test_tensors_on_different_devices_are_rejected"
    assert known in seen and seen[known].marked, sorted(seen)


# ------------------------------------------------------------------ the scanner

def one(source: str) -> list[CudaTest]:
    return scan("import pytest\nimport torch\n\n" + source, "test_example.py")


@pytest.mark.parametrize("source, use", [
    pytest.param("def test_it():\n    torch.zeros(1, device='cuda')\n",
                 'device="cuda" at line 5', id="device-keyword"),
    pytest.param("def test_it():\n    torch.zeros(1).to('cuda:1')\n",
                 '"cuda:1" at line 5', id="indexed-device-string"),
    pytest.param("def test_it(x):\n    x.cuda()\n", ".cuda() at line 5", id="dot-cuda"),
    pytest.param("def test_it():\n    torch.cuda.synchronize()\n",
                 "torch.cuda.synchronize() at line 5", id="torch-cuda-call"),
    pytest.param("@pytest.mark.parametrize('d', ['cuda'])\ndef test_it(d):\n    pass\n",
                 '"cuda" at line 4', id="parametrized-literal"),
    pytest.param("class TestIt:\n    def test_it(self):\n        torch.ones(1, device='cuda')\n",
                 'device="cuda" at line 6', id="method-of-unmarked-class"),
    pytest.param("def test_it():\n    d = 'cuda' if torch.cuda.is_available() else 'cuda:1'\n",
                 '"cuda:1" at line 5', id="both-branches-cuda"),
    pytest.param("@pytest.mark.slow\ndef test_it():\n    torch.ones(1, device='cuda')\n",
                 'device="cuda" at line 6', id="non-gpu-marker-only"),
    pytest.param("@pytest.mark.sm120(hardware=False)\ndef test_it():\n"
                 "    torch.ones(1, device='cuda')\n",
                 'device="cuda" at line 6', id="selection-only-arch-marker"),
])
def test_scanner_flags_unmarked_cuda_test(source, use):
    assert [(t.nodeid.rsplit("::", 1)[1], t.use, t.marked) for t in one(source)] == \
        [("test_it", use, False)]


@pytest.mark.parametrize("source", [
    pytest.param("@pytest.mark.gpu\ndef test_it():\n    torch.ones(1, device='cuda')\n",
                 id="function-marker"),
    pytest.param("@pytest.mark.sm90()\ndef test_it(x):\n    x.cuda()\n",
                 id="called-arch-marker"),
    pytest.param("@pytest.mark.graph\nclass TestIt:\n    def test_it(self):\n"
                 "        torch.cuda.synchronize()\n", id="class-decorator"),
    pytest.param("class TestIt:\n    pytestmark = [pytest.mark.fp8]\n\n"
                 "    def test_it(self):\n        torch.cuda.synchronize()\n",
                 id="class-pytestmark"),
    pytest.param("pytestmark = pytest.mark.gpu\n\n\ndef test_it():\n"
                 "    torch.ones(1, device='cuda')\n", id="module-pytestmark"),
    pytest.param("pytestmark = [pytest.mark.slow, pytest.mark.perf]\n\n\ndef test_it():\n"
                 "    torch.ones(1, device='cuda')\n", id="module-pytestmark-list"),
])
def test_scanner_accepts_gpu_marked_cuda_test(source):
    assert [t.marked for t in one(source)] == [True]


def test_scanner_leaves_a_cuda_param_to_its_gpu_mark():
    # The CPU param runs anywhere; the CUDA one is skipped and counted through its mark.
    assert one("@pytest.mark.parametrize('d', ['cpu', pytest.param('cuda', "
               "marks=pytest.mark.gpu)])\ndef test_it(d):\n    pass\n") == []


@pytest.mark.parametrize("source", [
    pytest.param("def test_it(device):\n    torch.ones(1, device=device)\n",
                 id="device-fixture"),
    pytest.param("def test_it():\n    if torch.cuda.is_available():\n        pytest.skip('x')\n",
                 id="availability-query"),
    pytest.param("def test_it(monkeypatch):\n"
                 "    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)\n",
                 id="patching-torch-cuda"),
    pytest.param("def test_it(monkeypatch):\n"
                 "    monkeypatch.setattr(torch.version, 'cuda', None)\n",
                 id="patching-an-attribute-named-cuda"),
    pytest.param("def helper():\n    return torch.ones(1, device='cuda')\n",
                 id="non-test-function"),
    pytest.param("def test_it():\n    assert '--det-require=cuda'\n", id="longer-string"),
    pytest.param("def test_it():\n    d = 'cpu' if not torch.cuda.is_available() else 'cuda'\n",
                 id="device-chosen-at-run-time"),
])
def test_scanner_ignores_test_without_cuda_use(source):
    assert one(source) == []
