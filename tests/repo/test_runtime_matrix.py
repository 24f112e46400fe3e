"""tox.ini and .github/workflows: the runtime matrix is what the docs say, and a broken copy
of either is caught.

tox.ini is read through tox's own loader (`tox config`), so substitutions and section
references resolve as tox resolves them; the workflows through PyYAML, and linted with
check-jsonschema's copy of GitHub's workflow schema (actionlint: test_ci_actionlint.py; the
README and docs against both: test_ci_docs.py). The checkers return problems, one sentence
each, so each "fails on a broken copy" test names the property it broke.
"""

from __future__ import annotations

import configparser
import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from det_suite.platform import triton_compat
from det_suite.pytest_plugin.markers import MARKERS

yaml = pytest.importorskip("yaml", reason="pyyaml is in det-suite's test extra")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CPU_TORCH = "torch==2.13.0"
# The SGLang PR's runtime stack (docs/ci-runners.md, tox env gpu-sglang0523, nightly.yml's label).
SEED_STACK = {"sglang": "0.5.23", "torch": "2.14.1", "triton": "3.8.0",
              "flashinfer-python": "0.7.2", "sglang-kernel": "0.4.10"}
PASSED_VARIABLES = ("DET_SUITE_MODEL_PATH", "DET_SUITE_ARCH", "HF_HOME", "HF_HUB_OFFLINE",
                    "CUDA_VISIBLE_DEVICES")
TOX_KEYS = ("deps", "commands", "commands_pre", "pass_env", "system_site_packages",
            "skip_install")


def cpu_env(version: tuple[int, int]) -> str:
    return f"cpu-triton{version[0]}{version[1]}"


# ------------------------------------------------------------------ reading

def tox_config(ini: Path) -> dict[str, dict[str, list[str]]]:
    """{env: {key: lines}} for every env in `ini`, as tox resolves them."""
    tox = shutil.which("tox", path=str(Path(sys.executable).parent)) or shutil.which("tox")
    if tox is None:
        pytest.skip("tox is not installed (it is in det-suite's test extra)")
    run = subprocess.run([tox, "-c", str(ini), "config", "-e", "ALL", "-k", *TOX_KEYS],
                         capture_output=True, text=True, cwd=ini.parent, timeout=120)
    assert run.returncode == 0, run.stderr
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(run.stdout)
    return {section.removeprefix("testenv:"): {k: [line.strip() for line in v.splitlines()
                                                    if line.strip()]
                                                for k, v in parser[section].items()}
            for section in parser.sections()
            if section.startswith("testenv:") and not section.startswith("testenv:.")}


def envlist(ini: Path) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ini)
    return [e.strip() for e in re.split(r"[,\s]+", parser["tox"]["envlist"]) if e.strip()]


@lru_cache(maxsize=None)
def real_tox() -> dict:
    return tox_config(ROOT / "tox.ini")


def load_workflows(folder: Path) -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(folder.glob("*.yml"))}


def commands(env: dict, key: str = "commands") -> list[list[str]]:
    return [shlex.split(line) for line in env.get(key, [])]


def flag_value(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def marker_names(expression: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][\w]*", expression)) - {"and", "or", "not"}


# ------------------------------------------------------------------ tox.ini checks

def tox_problems(config: dict, listed: list[str]) -> list[str]:
    problems = []
    for version in triton_compat.TESTED:
        name = cpu_env(version)
        if name not in config:
            problems.append(f"no tox env {name} for supported Triton {version}")
        elif not any(d.startswith(f"triton=={version[0]}.{version[1]}.")
                     for d in config[name]["deps"]):
            problems.append(f"{name} does not pin Triton {version[0]}.{version[1]}")
        if name not in listed:
            problems.append(f"{name} is not in tox's envlist")
    for name, env in config.items():
        deps = env["deps"]
        if name.startswith("cpu-"):
            if CPU_TORCH not in deps:
                problems.append(f"{name} does not pin {CPU_TORCH}")
            if not any(d.startswith("numpy") for d in deps):
                problems.append(f"{name} does not name the numpy it needs")
        if name.startswith("gpu"):
            if env["system_site_packages"] != ["True"] or env["skip_install"] != ["True"]:
                problems.append(f"{name} must reuse the runner's stack (sitepackages, "
                                "skip_install)")
            if any(re.match(r"(torch|triton)\b", d) for d in deps):
                problems.append(f"{name} reinstalls torch or Triton")
            if not any("--no-deps" in c for c in commands(env, "commands_pre")):
                problems.append(f"{name} installs det-suite without --no-deps")
        for variable in PASSED_VARIABLES:
            if not any(fnmatch.fnmatchcase(variable, p) for p in env["pass_env"]):
                problems.append(f"{name} does not pass {variable} through")
        folder = f"/reports/{name}/"
        for argv in commands(env):
            if argv and argv[0] == "pytest":
                for flag in ("--junitxml", "--report-log"):
                    if folder not in (flag_value(argv, flag) or ""):
                        problems.append(f"{name}: pytest {flag} does not write into {folder}")
                expression = flag_value(argv, "-m")
                unknown = marker_names(expression or "") - set(MARKERS)
                if expression is None or unknown:
                    problems.append(f"{name}: markers {expression!r} select no registered "
                                    f"set (unknown: {sorted(unknown)})")
        if not any(folder in " ".join(argv) for argv in commands(env)):
            problems.append(f"{name} writes no report into {folder}")
    ran = {argv[0] for argv in commands(config.get("lint", {})) if argv}
    for tool in ("det-suite", "check-jsonschema", "actionlint"):
        if tool not in ran:
            problems.append(f"lint does not run {tool}")
    return problems


def test_tox_ini_has_every_promised_env_and_property():
    problems = tox_problems(real_tox(), envlist(ROOT / "tox.ini"))
    assert problems == []
    print(f"tox.ini: {len(real_tox())} envs checked")


def test_tox_numpy_pins_match_what_each_triton_interpreter_needs():
    """cpu-triton36 must exclude every numpy 3.6's interpreter fails on; the others must allow
    the newest numpy (the range 3.6 cannot cover)."""
    from packaging.requirements import Requirement

    for version in triton_compat.TESTED:
        (numpy,) = [Requirement(d) for d in real_tox()[cpu_env(version)]["deps"]
                    if d.startswith("numpy")]
        for candidate in ("2.2.6", "2.3.0", "2.4.6"):
            allowed = numpy.specifier.contains(candidate)
            assert not (allowed and triton_compat.numpy_problem(version, candidate)), \
                (version, candidate)
        assert numpy.specifier.contains("2.4.6") == (version != (3, 6))


def test_seed_stack_pins_agree_between_tox_workflows_and_readme():
    (argv,) = [a for a in commands(real_tox()["gpu-sglang0523"], "commands_pre")
               if "check_stack.py" in " ".join(a)]
    pinned = dict(arg.split("==") for arg in argv if "==" in arg)
    assert pinned == SEED_STACK
    nightly = (WORKFLOWS / "nightly.yml").read_text()
    assert f"sglang-{SEED_STACK['sglang']}" in nightly
    if not (ROOT / "docs").is_dir():
        return   # a checkout without docs/: the pins above are still checked
    readme = (ROOT / "docs" / "ci-runners.md").read_text()
    for text in (f"SGLang {SEED_STACK['sglang']}", f"PyTorch {SEED_STACK['torch']}",
                 f"Triton {SEED_STACK['triton']}", f"FlashInfer {SEED_STACK['flashinfer-python']}",
                 f"sglang-kernel {SEED_STACK['sglang-kernel']}"):
        assert text in readme, text


BROKEN_TOX = [
    ("drop-triton39", lambda s: s.replace("[testenv:cpu-triton39]", "[testenv:cpu-old39]"),
     "cpu-triton39 does not pin Triton 3.9"),
    ("cpu-torch-unpinned", lambda s: s.replace("    torch==2.13.0\n    triton==3.7.1",
                                               "    torch\n    triton==3.7.1"),
     "cpu-triton37 does not pin torch==2.13.0"),
    ("gpu-reinstalls-torch", lambda s: s.replace("    pytest-xdist>=3.5\n    pytest-reportlog",
                                                 "    pytest-xdist>=3.5\n    torch\n"
                                                 "    pytest-reportlog"),
     "gpu reinstalls torch"),
    ("junit-elsewhere", lambda s: s.replace("reports/{envname}/junit.xml", "junit.xml"),
     "--junitxml does not write into"),
    ("unknown-marker", lambda s: s.replace('-m "not perf"', '-m "not perff"'),
     "unknown: ['perff']"),
    ("actionlint-dropped", lambda s: s.replace("    actionlint -no-color", "    # actionlint"),
     "lint does not run actionlint"),
    ("model-path-not-passed", lambda s: s.replace("    DET_SUITE_*\n", "")
     .replace("    DET_SUITE_MODEL_PATH\n", ""), "does not pass DET_SUITE_MODEL_PATH"),
]


@pytest.mark.parametrize("mutate, expected", [b[1:] for b in BROKEN_TOX],
                         ids=[b[0] for b in BROKEN_TOX])
def test_broken_tox_ini_is_caught(tmp_path, mutate, expected):
    text = (ROOT / "tox.ini").read_text()
    broken = mutate(text)
    assert broken != text, "the mutation no longer applies to tox.ini"
    ini = tmp_path / "tox.ini"
    ini.write_text(broken)
    problems = tox_problems(tox_config(ini), envlist(ini))
    assert any(expected in p for p in problems), problems


# ------------------------------------------------------------------ workflow checks

def _runs(job: dict) -> list[str]:
    return [step.get("run", "") for step in job.get("steps", [])]


def _labels(job: dict) -> list[str]:
    runs_on = job.get("runs-on", [])
    return [runs_on] if isinstance(runs_on, str) else list(runs_on)


def _matrix(job: dict, key: str) -> list:
    return list(job.get("strategy", {}).get("matrix", {}).get(key, []))


def _tox_envs_called(job: dict) -> set[str]:
    called = set(_matrix(job, "toxenv"))
    for run in _runs(job):
        called |= {e for e in re.findall(r"tox -e \"?([\w.-]+)", run) if "$" not in e}
    return called


def workflow_problems(workflows: dict[str, dict], tox_envs: set[str],
                      cpu_envs: list[str]) -> list[str]:
    problems = []
    for name, flow in workflows.items():
        triggers = flow.get("on", flow.get(True, {}))  # PyYAML reads `on:` as True
        if "concurrency" not in flow:
            problems.append(f"{name}: no concurrency group")
        for job_name, job in flow.get("jobs", {}).items():
            where = f"{name}:{job_name}"
            if "timeout-minutes" not in job:
                problems.append(f"{where}: no timeout-minutes")
            for env in _tox_envs_called(job) - tox_envs:
                problems.append(f"{where}: calls tox env {env}, which tox.ini lacks")
            labels = _labels(job)
            if "self-hosted" not in labels:
                continue
            families = [l for l in labels if l in ("sm90", "sm120")] or \
                [f for f in _matrix(job, "family") if "${{ matrix.family }}" in labels]
            if not families:
                problems.append(f"{where}: self-hosted job without an sm90/sm120 label")
            for run in _runs(job):
                run = run.replace("${{ matrix.family }}", "FAMILY")
                if not re.search(r'gpu-suite --out|-m pytest|tox"? -e', run):
                    continue  # not a test run
                required = re.findall(r"--(?:det-)?require[= ]([\w,]+)", run)
                if not required:
                    problems.append(f"{where}: GPU run without --det-require: {run.strip()!r}")
                for value in required:
                    marks = set(value.split(","))
                    unknown = marks - set(MARKERS) - {"FAMILY"}
                    if unknown:
                        problems.append(f"{where}: unregistered markers {sorted(unknown)}")
                    if "model" not in marks and not ({"gpu"} <= marks and (
                            marks & set(families) or "FAMILY" in marks)):
                        problems.append(f"{where}: --det-require={value} misses gpu or the "
                                        f"runner's family {families}")
            uploads = [s for s in job.get("steps", [])
                       if str(s.get("uses", "")).startswith("actions/upload-artifact")]
            if not any(s.get("if") == "always()" for s in uploads):
                problems.append(f"{where}: reports are not uploaded when the job fails")
            if not any("job_summary.py" in run for run in _runs(job)):
                problems.append(f"{where}: no job summary")
        if name == "cpu.yml":
            matrix = sorted(e for j in flow["jobs"].values() for e in _matrix(j, "toxenv"))
            if matrix != sorted(cpu_envs):
                problems.append(f"{name}: tox matrix {matrix} is not the CPU envs {cpu_envs}")
            if any("self-hosted" in _labels(j) for j in flow["jobs"].values()):
                problems.append(f"{name}: CPU jobs must run on hosted runners")
        if name == "nightly.yml" and "schedule" not in triggers:
            problems.append(f"{name}: not scheduled")
    for family in ("sm90", "sm120"):
        if f"gpu-{family}.yml" not in workflows:
            problems.append(f"no GPU workflow for {family}")
    return problems


def _cpu_envs() -> list[str]:
    return [e for e in envlist(ROOT / "tox.ini") if e.startswith("cpu-")]


def test_workflows_are_consistent_with_tox_and_the_plugin():
    workflows = load_workflows(WORKFLOWS)
    problems = workflow_problems(workflows, set(real_tox()), _cpu_envs())
    assert problems == []
    print(f"{len(workflows)} workflows, "
          f"{sum(len(f['jobs']) for f in workflows.values())} jobs checked")


BROKEN_WORKFLOWS = [
    ("gpu-without-require", "gpu-sm90.yml", ("--require gpu,sm90", ""), "--det-require"),
    ("wrong-family", "gpu-sm120.yml", ("-- --det-require=gpu,sm120", "-- --det-require=gpu,sm90"),
     "misses gpu or the runner's family"),
    ("missing-tox-env", "cpu.yml", ("cpu-triton39]", "cpu-triton310]"),
     "calls tox env cpu-triton310"),
    ("no-timeout", "gpu-sm90.yml", ("    timeout-minutes: 150\n", ""), "no timeout-minutes"),
    ("hosted-label-lost", "gpu-sm120.yml", ("[self-hosted, linux, gpu, sm120]",
                                            "[self-hosted, linux, gpu]"),
     "without an sm90/sm120 label"),
]


@pytest.mark.parametrize("file, change, expected", [b[1:] for b in BROKEN_WORKFLOWS],
                         ids=[b[0] for b in BROKEN_WORKFLOWS])
def test_broken_workflow_is_caught(tmp_path, file, change, expected):
    shutil.copytree(WORKFLOWS, tmp_path, dirs_exist_ok=True)
    text = (tmp_path / file).read_text()
    assert change[0] in text, "the mutation no longer applies"
    (tmp_path / file).write_text(text.replace(change[0], change[1], 1))
    problems = workflow_problems(load_workflows(tmp_path), set(real_tox()), _cpu_envs())
    assert any(expected in p for p in problems), problems


# ------------------------------------------------------------------ workflow linters

def _tool(name: str) -> str | None:
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def _schema_lint(folder: Path) -> subprocess.CompletedProcess:
    tool = _tool("check-jsonschema")
    if tool is None:
        pytest.skip("check-jsonschema is not installed (it is in det-suite's test extra)")
    return subprocess.run([tool, "--builtin-schema", "vendor.github-workflows",
                           *map(str, sorted(folder.glob("*.yml")))],
                          capture_output=True, text=True, timeout=120)


def test_workflows_pass_github_workflow_schema():
    run = _schema_lint(WORKFLOWS)
    assert run.returncode == 0, run.stdout + run.stderr


def test_workflow_schema_lint_fails_on_broken_copy(tmp_path):
    shutil.copytree(WORKFLOWS, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "gpu-sm90.yml"
    path.write_text(path.read_text().replace("runs-on:", "runs_on:", 1))
    run = _schema_lint(tmp_path)
    assert run.returncode != 0 and "runs-on" in run.stdout


# ------------------------------------------------------------------ the workflows' scripts

def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / ".github" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("requirements, nightly, expected", [
    (["pytest"], False, []),
    (["pytest==0.0.1"], False, ["pytest {v} installed, expected pytest==0.0.1"]),
    (["det-suite-no-such-dist==1.0"], False, ["det-suite-no-such-dist is not installed"]),
    (["pytest"], True, ["pytest {v} is not a nightly (.dev) build"]),
], ids=["installed", "wrong-version", "missing", "not-nightly"])
def test_check_stack_names_each_mismatch(requirements, nightly, expected):
    from importlib.metadata import version

    problems = _script("check_stack").check(requirements, nightly)
    wanted = [e.format(v=version("pytest")) for e in expected]
    assert len(problems) == len(wanted)
    assert all(p.startswith(w) for p, w in zip(problems, wanted)), problems


def test_job_summary_counts_junit_and_includes_markdown(tmp_path):
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "junit.xml").write_text(
        '<testsuites><testsuite tests="5" failures="1" errors="0" skipped="2"/></testsuites>')
    (tmp_path / "bench.md").write_text("geomean 0.97")
    text = _script("job_summary").summary("gpu-suite (sm90)", tmp_path)
    assert "| `gpu/junit.xml` | 2 | 1 | 0 | 2 |" in text
    assert "geomean 0.97" in text


def test_job_summary_says_when_no_test_ran(tmp_path):
    assert "the tests did not run" in _script("job_summary").summary("x", tmp_path)
