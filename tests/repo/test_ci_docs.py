"""The README's runtime-matrix section and docs/runtime-matrix.md say what tox.ini, the
workflows, .github/actionlint.yaml and ./bootstrap do: every supported Triton has its column
in the lint's instruction table and its row of results, every runner label and repository
variable the workflows use is documented and known to actionlint, and each pinned version
is the same wherever it is written. Each checker returns problems, one sentence each, and
is shown to catch a broken copy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from det_suite.platform import triton_compat
from tests.repo.test_runtime_matrix import (
    CPU_TORCH, cpu_env, load_workflows, real_tox)

yaml = pytest.importorskip("yaml", reason="pyyaml is in det-suite's test extra")

ROOT = Path(__file__).resolve().parents[2]
MATRIX_DOC = ROOT / "docs" / "runtime-matrix.md"
RUNNERS_DOC = ROOT / "docs" / "ci-runners.md"
pytestmark = pytest.mark.skipif(not (ROOT / "docs").is_dir(),
                                reason="docs/ is absent from this checkout")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Labels every self-hosted Linux runner carries without being told.
DEFAULT_LABELS = {"self-hosted", "linux"}


def _label(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _table(text: str, header_start: str) -> list[list[str]]:
    """Rows (header first) of the Markdown table whose header line starts `header_start`."""
    lines = text.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith(header_start)]
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not re.fullmatch(r"\|( ?-+ ?\|)+", line.replace(" ", "")):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def readme_section(text: str) -> str:
    """The runners page's part about the runtime matrix, runners and variables."""
    start = text.index("## Runtime matrix")
    end = text.index("\n## pytest markers", start + 1)
    return text[start:end]


# ------------------------------------------------------------------ docs/runtime-matrix.md

def matrix_doc_problems(text: str, tox: dict) -> list[str]:
    problems = []
    header, *rows = _table(text, "| arch | table | entry |")
    columns = [c.removeprefix("Triton ") for c in header[3:]]
    for version in triton_compat.TESTED:
        if not any(c.startswith(_label(version) + ".") for c in columns):
            problems.append(f"instruction table: no column for Triton {_label(version)}")
    for row in rows:
        if len(row) != len(header) or not all(row):
            problems.append(f"instruction table: row {row[:3]} has an empty or missing cell")
    results = {row[0] for row in _table(text, "| Triton | numpy | lint-policy |")[1:]}
    for version in triton_compat.TESTED:
        (pin,) = [d for d in tox[cpu_env(version)]["deps"] if d.startswith("triton==")]
        pinned = pin.removeprefix("triton==")
        if pinned not in results:
            problems.append(f"results table: no row for {cpu_env(version)}'s Triton {pinned}")
        if pinned not in columns:
            problems.append(f"instruction table: no column for {cpu_env(version)}'s Triton "
                            f"{pinned}")
    return problems


def test_runtime_matrix_doc_records_every_tested_triton():
    assert matrix_doc_problems(MATRIX_DOC.read_text(), real_tox()) == []


def _drop_column(text: str, version: str) -> str:
    return re.sub(rf" Triton {re.escape(version)} \|", "", text, count=1)


BROKEN_DOC = [
    ("column-dropped", lambda s: _drop_column(s, "3.6.0"),
     "no column for Triton 3.6"),
    ("cell-empty", lambda s: s.replace("| sm_89 | sm89 | default | mma.sync m16n8k32 e4m3 |",
                                       "| sm_89 | sm89 | default |  |", 1),
     "row ['sm_89', 'sm89', 'default'] has an empty or missing cell"),
    ("results-row-dropped", lambda s: re.sub(r"\n\| 3\.8\.0 \|[^\n]*", "", s, count=1),
     "results table: no row for cpu-triton38's Triton 3.8.0"),
]


@pytest.mark.parametrize("mutate, expected", [b[1:] for b in BROKEN_DOC],
                         ids=[b[0] for b in BROKEN_DOC])
def test_broken_runtime_matrix_doc_is_caught(mutate, expected):
    text = MATRIX_DOC.read_text()
    broken = mutate(text)
    assert broken != text, "the mutation no longer applies to docs/runtime-matrix.md"
    problems = matrix_doc_problems(broken, real_tox())
    assert any(expected in p for p in problems), problems


# ------------------------------------------------------------------ README and actionlint's config

def _workflow_labels(workflows: dict) -> set[str]:
    labels = set()
    for flow in workflows.values():
        for job in flow.get("jobs", {}).values():
            runs_on = job.get("runs-on", [])
            runs_on = [runs_on] if isinstance(runs_on, str) else runs_on
            if "self-hosted" not in runs_on:
                continue
            matrix = job.get("strategy", {}).get("matrix", {})
            for label in runs_on:
                key = re.fullmatch(r"\$\{\{ matrix\.(\w+) \}\}", label)
                labels |= set(matrix.get(key.group(1), [])) if key else {label}
    return labels - DEFAULT_LABELS


def _workflow_variables(texts: list[str]) -> set[str]:
    return {v for text in texts for v in re.findall(r"\bvars\.(\w+)", text)}


def runner_docs_problems(readme: str, config: dict, workflow_texts: list[str]) -> list[str]:
    problems = []
    section = readme_section(readme)
    workflows = {str(i): yaml.safe_load(t) for i, t in enumerate(workflow_texts)}
    labels = _workflow_labels(workflows)
    known_labels = set(config.get("self-hosted-runner", {}).get("labels", []))
    for label in sorted(labels - known_labels):
        problems.append(f"runner label {label!r} is not in .github/actionlint.yaml")
    for label in sorted(known_labels - labels):
        problems.append(f".github/actionlint.yaml lists runner label {label!r} no job uses")
    for label in sorted(labels):
        if f"| `{label}` |" not in section:
            problems.append(f"the runners page's runner table does not describe label {label!r}")
    variables = _workflow_variables(workflow_texts)
    known_variables = set(config.get("config-variables") or [])
    for name in sorted(variables - known_variables):
        problems.append(f"variable {name} is not in .github/actionlint.yaml")
    for name in sorted(known_variables - variables):
        problems.append(f".github/actionlint.yaml lists variable {name} no workflow reads")
    for name in sorted(variables):
        if f"| `{name}` |" not in section:
            problems.append(f"the runners page's variable table does not describe {name}")
    if CPU_TORCH not in section or CPU_INDEX not in section:
        problems.append(f"the runners page's runtime section does not say how to get the CPU build "
                        f"({CPU_TORCH} with {CPU_INDEX})")
    for text in workflow_texts:
        for index in re.findall(r"'(https://download\.pytorch\.org/whl/\w+)'", text):
            if index != CPU_INDEX:
                problems.append(f"a workflow's torch index {index} is not {CPU_INDEX}")
    return problems


def _real_runner_inputs():
    folder = ROOT / ".github" / "workflows"
    return (RUNNERS_DOC.read_text(),
            yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text()),
            [p.read_text() for p in sorted(folder.glob("*.yml"))])


def test_readme_documents_every_runner_label_and_variable():
    assert runner_docs_problems(*_real_runner_inputs()) == []


BROKEN_RUNNER_DOCS = [
    ("label-undocumented", "readme", "| `sglang-0.5.23` |", "| sglang |",
     "the runners page's runner table does not describe label 'sglang-0.5.23'"),
    ("variable-undocumented", "readme", "| `DET_SUITE_SGLANG_RUNNERS` |", "| runners |",
     "the runners page's variable table does not describe DET_SUITE_SGLANG_RUNNERS"),
    ("cpu-index-undocumented", "readme", "https://download.pytorch.org/whl/cpu tox",
     "tox", "does not say how to get the CPU build"),
    ("new-label-not-configured", "workflow", "[self-hosted, linux, gpu, sm90]",
     "[self-hosted, linux, gpu, sm90, h200]", "runner label 'h200' is not in"),
    ("new-variable-not-configured", "workflow", "vars.DET_SUITE_GPU_PYTHON",
     "vars.DET_SUITE_GPU_PY", "variable DET_SUITE_GPU_PY is not in"),
]


@pytest.mark.parametrize("where, old, new, expected", [b[1:] for b in BROKEN_RUNNER_DOCS],
                         ids=[b[0] for b in BROKEN_RUNNER_DOCS])
def test_broken_runner_docs_are_caught(where, old, new, expected):
    readme, config, texts = _real_runner_inputs()
    if where == "readme":
        assert old in readme_section(readme), "the mutation no longer applies to docs/ci-runners.md"
        readme = readme.replace(old, new)
    else:
        first = next((i for i, t in enumerate(texts) if old in t), None)
        assert first is not None, "the mutation no longer applies to the workflows"
        texts = [t.replace(old, new) if i == first else t for i, t in enumerate(texts)]
    problems = runner_docs_problems(readme, config, texts)
    assert any(expected in p for p in problems), problems


# ------------------------------------------------------------------ pins written twice

def _bootstrap_pins() -> dict[str, str]:
    text = (ROOT / "bootstrap").read_text()
    return {Requirement(r).name: str(Requirement(r).specifier)
            for r in re.findall(r'"((?:torch|triton|numpy)[=<>!~][^"]*)"', text)}


def test_bootstrap_installs_the_cpu_triton36_stack():
    """.ci/run's stack (./bootstrap) is the one cpu-triton36 and the lint env pin."""
    pins = _bootstrap_pins()
    assert set(pins) == {"torch", "triton", "numpy"}, pins
    for env in (cpu_env((3, 6)), "lint"):
        deps = {Requirement(d).name: str(Requirement(d).specifier)
                for d in real_tox()[env]["deps"]
                if Requirement(d).name in pins}
        assert deps == pins, env


def test_lint_tools_are_pinned_alike_in_tox_and_the_test_extra():
    """A tool both tox's lint env and the test extra install (check-jsonschema, actionlint,
    ShellCheck) has one version range, so `tox -e lint` and `.ci/run` lint alike."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = {Requirement(r).name: Requirement(r).specifier
             for r in project["optional-dependencies"]["test"]}
    lint = {Requirement(d).name: Requirement(d).specifier for d in real_tox()["lint"]["deps"]}
    shared = set(extra) & set(lint)
    assert "check-jsonschema" in shared
    assert {name: str(lint[name]) for name in shared} == \
        {name: str(extra[name]) for name in shared}
