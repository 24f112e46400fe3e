"""`bench_e2e` end to end with in-process fake boots: the output folder (plan, one file per
boot, the aggregate), resume and --force, Ctrl-C and a failed boot leaving finished boots
on disk and nothing half-written, and what it refuses before booting anything."""

import json

import pytest

from det_suite.bench.e2e import (EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, Arm, E2ESettings,
                                 E2EUsageError, bench_e2e)
from det_suite.bench.e2e.boot import run_boot
from det_suite.bench.e2e.processes import BOOT_SCHEMA, BootFailed
from det_suite.reports.files import write_json_atomic
from tests.unit.bench.test_e2e_boot import VOCAB, FakeBackend, FakeClock, no_gate

SLOWDOWN = {"control": 1.0, "det": 1.25}


class FakeRunner:
    """Runs a boot in this process on a FakeBackend and writes its record like the worker;
    `interrupt_at` / `fail_at` (boot index) raise instead, as Ctrl-C or a crash would."""

    def __init__(self, *, interrupt_at=None, fail_at=None):
        self.interrupt_at, self.fail_at, self.ran = interrupt_at, fail_at, []

    def __call__(self, job, path, on_event):
        if job["index"] == self.interrupt_at:
            raise KeyboardInterrupt
        if job["index"] == self.fail_at:
            raise BootFailed(f"boot {job['index'] + 1}: exited with code 1")
        self.ran.append(job["index"])
        clock = FakeClock()
        backend = FakeBackend(clock, slowdown=SLOWDOWN[job["arm"]["name"]])
        samples = run_boot(backend, job["plan"], vocab=VOCAB, gate=no_gate(), clock=clock,
                           emit=on_event)
        write_json_atomic(path, {
            "schema": BOOT_SCHEMA, "index": job["index"], "letter": job["letter"],
            "arm": job["arm"], "device": "cpu", "run_s": 0.0,
            "environment": {"triton_interpret": True}, "packages": {}, "gpu": {},
            "thermal_gate": {"available": False, "reason": "no sensor (test)",
                             "max_temp_c": 55.0},
            "floor": {"weight_bytes": 1000, "measured": False, "reason": "no GPU"},
            "samples": samples})


def _settings(out, **overrides):
    values = dict(arms=(Arm("control", mode="stock"), Arm("det")), prefixes=(8,),
                  batches=(1, 2), output_tokens=3, warmup=1, samples=2, device="cpu")
    return E2ESettings(out=str(out), **{**values, **overrides})


def _files(out):
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


def test_a_run_writes_plan_boots_and_the_aggregate(tmp_path):
    runner = FakeRunner()
    result = bench_e2e(_settings(tmp_path), boot_runner=runner)
    assert result.exit_code == EXIT_OK and runner.ran == [0, 1, 2, 3]
    assert _files(tmp_path) == ["boots/boot-01-A-control.json", "boots/boot-02-B-det.json",
                                "boots/boot-03-B-det.json", "boots/boot-04-A-control.json",
                                "e2e.json", "e2e.md", "e2e_samples.png", "plan.json"]
    payload = json.loads((tmp_path / "e2e.json").read_text())
    assert payload["complete"] and payload["ok"] and not payload["speed_claim"]
    assert payload["kind"] == "e2e" and len(payload["boots"]) == 4
    assert sum(len(b["samples"]) for b in payload["boots"]) == 4 * 2 * 3   # warm-ups kept
    assert all(c["ratios"]["det"]["e2e_ms"]["ratio"] == 1.25 for c in payload["cells"])
    assert any("det / control end to end: 1.250 to 1.250" in h for h in payload["headline"])


def test_markdown_is_in_the_seed_shape(tmp_path):
    bench_e2e(_settings(tmp_path), boot_runner=FakeRunner())
    text = (tmp_path / "e2e.md").read_text()
    assert "| Prefix / batch | A control, s (boot medians; range) | B det, s (boot medians; " \
           "range) | det / control [95% CI] |" in text
    assert "| 8 / 2 | 0.3750 (0.3750, 0.3750; 0.3750-0.3750) | 0.4688 (0.4688, 0.4688; " \
           "0.4688-0.4688) | 1.250 [1.250, 1.250] |" in text
    assert "**Not a speed claim**" in text and "boot order A B B A" in text
    assert "thermal gate UNAVAILABLE (no sensor (test))" in text


def test_an_existing_run_is_refused_without_resume_or_force(tmp_path):
    bench_e2e(_settings(tmp_path), boot_runner=FakeRunner())
    with pytest.raises(E2EUsageError, match="already holds an e2e run.*--resume.*--force"):
        bench_e2e(_settings(tmp_path), boot_runner=FakeRunner())


def test_force_starts_over(tmp_path):
    bench_e2e(_settings(tmp_path), boot_runner=FakeRunner())
    runner = FakeRunner()
    assert bench_e2e(_settings(tmp_path, force=True), boot_runner=runner).exit_code == EXIT_OK
    assert runner.ran == [0, 1, 2, 3]


def test_resume_runs_only_the_missing_boots(tmp_path):
    bench_e2e(_settings(tmp_path), boot_runner=FakeRunner(interrupt_at=2))
    runner = FakeRunner()
    result = bench_e2e(_settings(tmp_path, resume=True), boot_runner=runner)
    assert runner.ran == [2, 3] and result.exit_code == EXIT_OK
    assert result.payload["complete"]


def test_resume_refuses_other_settings(tmp_path):
    bench_e2e(_settings(tmp_path), boot_runner=FakeRunner(interrupt_at=1))
    with pytest.raises(E2EUsageError, match="other settings \\(samples differ\\)"):
        bench_e2e(_settings(tmp_path, resume=True, samples=5), boot_runner=FakeRunner())


def test_ctrl_c_keeps_finished_boots_and_writes_an_incomplete_aggregate(tmp_path):
    result = bench_e2e(_settings(tmp_path), boot_runner=FakeRunner(interrupt_at=2))
    assert result.exit_code == EXIT_INTERRUPTED
    files = _files(tmp_path)
    assert [f for f in files if f.startswith("boots/")] == ["boots/boot-01-A-control.json",
                                                            "boots/boot-02-B-det.json"]
    assert not [f for f in files if f.endswith(".tmp")]
    payload = json.loads((tmp_path / "e2e.json").read_text())
    assert payload["interrupted"] and not payload["complete"] and not payload["ok"]
    assert "INCOMPLETE: 2 of 4 boots finished" in payload["headline"]
    assert "Run INCOMPLETE: 2 of 4 boots" in (tmp_path / "e2e.md").read_text()


def test_a_failed_boot_stops_the_run_with_exit_1(tmp_path):
    result = bench_e2e(_settings(tmp_path), boot_runner=FakeRunner(fail_at=1))
    assert result.exit_code == EXIT_ERROR
    assert result.payload["failure"] == "boot 2: exited with code 1"
    assert len(result.payload["boots"]) == 1


def test_an_unfinished_run_is_not_gated(tmp_path):
    settings = _settings(tmp_path)
    result = bench_e2e(settings, boot_runner=FakeRunner(interrupt_at=1))
    assert result.payload["gate"]["failures"] == []


@pytest.mark.parametrize("overrides, message", [
    (dict(arms=(Arm("control", mode="stock", cuda_graph=True), Arm("det"))),
     "arm control: graph=on needs a CUDA device"),
    (dict(max_ratio=1.05), "need[s]? a CUDA GPU with compiled kernels"),
    (dict(max_decode_floor_ratio=1.5), "need[s]? a CUDA GPU with compiled kernels"),
    (dict(arms=(Arm("control", mode="stock"), Arm("sg", backend="sglang"))),
     "backend 'sglang' is not wired into bench e2e yet"),
], ids=["graph-on-cpu", "ratio-gate-on-cpu", "floor-gate-on-cpu", "sglang"])
def test_refused_before_any_boot(tmp_path, overrides, message):
    runner = FakeRunner()
    with pytest.raises(E2EUsageError, match=message):
        bench_e2e(_settings(tmp_path, **overrides), boot_runner=runner)
    assert runner.ran == [] and _files(tmp_path) == []


def test_progress_lines_name_each_boot(tmp_path):
    lines = []
    bench_e2e(_settings(tmp_path, progress=lines.append, order="AB"), boot_runner=FakeRunner())
    assert "boot 1/2 A control: starting a fresh process (stock mode, eager decode, " \
           "embedded)" in lines
    assert sum("prefix 8 batch 2 sample" in line for line in lines) == 4


@pytest.mark.parametrize("argv, message", [
    (["--order", "AC"], "order: expected letters from AB"),
    (["--arm", "x=mode=fast", "--arm", "y=mode=det"], "arm x: mode: expected one of"),
    (["--arm", "only=mode=det"], "arms: expected at least two"),
    (["--prefixes", "8,x"], "prefixes: expected comma-separated ints"),
    (["--max-ratio", "1.05", "--device", "cpu"], "judge speed"),
], ids=["bad-order", "bad-arm", "one-arm", "bad-prefixes", "gate-on-cpu"])
def test_cli_usage_errors_exit_2(tmp_path, capsys, argv, message):
    from det_suite.cli import main

    assert main(["bench", "e2e", "--out", str(tmp_path / "run"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_cli_lists_e2e_beside_gemm(capsys):
    from det_suite.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    out = capsys.readouterr().out
    assert "gemm" in out and "e2e" in out
