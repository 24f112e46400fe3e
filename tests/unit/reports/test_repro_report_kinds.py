"""The reproducibility report's reading of each check's JSON: which kind a file is, and its
status, headline and skipped lines; a result of a check the report does not know is read
generically, and a malformed one is reported unreadable instead of crashing the report."""

import pytest

from det_suite.reports.repro.kinds import kind_of, summarize


@pytest.mark.parametrize("data, kind", [
    ({"schema": "det-suite/invariance/1"}, "invariance"),
    ({"lint": {"schema": "det-suite/policy-lint/2"}, "environment": {}}, "lint"),
    ({"schema": "det_suite.bench.gemm/1"}, "gemm-bench"),
    ({"comparisons": [], "det_exact": True, "control_reproduced": None}, "cache-hit"),
    ({"schema": "det-suite/e2e/1", "kind": "e2e"}, "e2e"),
    ({"steps": [], "pytest": None, "ok": True}, "gpu-suite"),
    ({"kind": "gsm8k", "schema": "det-suite/gsm8k-fixture/1"}, "gsm8k"),
    ({"schema": "det-suite/gsm8k-check/2"}, "gsm8k"),
    ({"kind": "fixed-work"}, "fixed-work"),
    ({"schema": "someone/else/1"}, "someone/else/1"),
    ({"schema": "det-suite/e2e-boot/1", "kind": "e2e"}, None),
    ({"schema": "det-suite/e2e-plan/1"}, None),
    ({"schema": "det-suite/repro-report/1"}, None),
    ({"rows": [1, 2]}, None),
    ([1, 2, 3], None),
], ids=["invariance", "lint-nested", "gemm", "cache-hit-layout", "e2e", "gpu-suite-layout",
        "gsm8k-kind", "gsm8k-schema", "declared-kind", "unknown-schema", "e2e-boot-part",
        "e2e-plan-part", "a-report", "no-kind", "not-an-object"])
def test_kind_of(data, kind):
    assert kind_of(data) == kind


def _invariance(ok=True, differing=0):
    return {"schema": "det-suite/invariance/1", "ok": ok, "run_seconds": 12.5,
            "cases": [{}] * 3, "providers": [{}] * 2,
            "counts": {"total": 40, "differing": differing},
            "det_suite_families": {"sm90": {"comparisons": 30, "differing": differing}},
            "verdicts": [{"provider": "det_suite:sm90", "status": "PASS" if ok else "FAIL",
                          "message": "invariant as claimed"}],
            "skipped_providers": [{"name": "sglang", "reason": "not installed"}],
            "graph_skipped": "needs a CUDA device"}


@pytest.mark.parametrize("kind, data, status, headline, skipped", [
    ("invariance", _invariance(), "pass",
     "40 bit-exact comparisons (torch.equal), 0 differ in total (controls included)",
     ["provider sglang: not installed", "CUDA Graph replay: needs a CUDA device"]),
    ("invariance", _invariance(ok=False, differing=2), "fail",
     "40 bit-exact comparisons (torch.equal), 2 differ in total (controls included)",
     ["provider sglang: not installed", "CUDA Graph replay: needs a CUDA device"]),
    # 12 variants linted, 5 of them compiled now (7 from the cache): the report counts 12, as
    # lint-policy's status line does, not the compiles.
    ("lint", {"lint": {"ok": True, "compiled": 5, "triton_version": "3.6.0", "violations": [],
                       "warnings": ["sm_80 not checked"],
                       "tables": [{"entries": [{"variants": [{}] * 8}, {"variants": [{}] * 4}]}]}},
     "pass",
     "12 launch variants cross-compiled (Triton 3.6.0), 0 violations",
     ["warning: sm_80 not checked"]),
    ("gemm-bench", {"ok": True, "shapes": [{}], "m": [1], "gate": {"failures": ["too slow"]},
                    "modes": {"graph": {"summary": {
                        "geomean_ratio": 0.98, "worst_ratio": 1.2, "worst_shape": "o",
                        "worst_m": 32, "worst_floor_ratio": None}}}}, "fail",
     "[graph] det-suite / torch._scaled_mm geometric mean 0.980, worst 1.200 at o M=32", []),
    ("cache-hit", {"exit_code": 0, "verdict": ["det mode: exact in all 4 comparisons"],
                   "skipped": ["det/graph: CUDA Graphs need a CUDA device"],
                   "settings": {"model": "m", "backend": "embedded", "modes": ["det"]}},
     "pass", "det mode: exact in all 4 comparisons",
     ["det/graph: CUDA Graphs need a CUDA device"]),
    ("e2e", {"ok": False, "complete": False, "failure": None, "interrupted": True,
             "headline": ["INCOMPLETE: 1 of 4 boots finished"], "notes": ["device cpu"],
             "summary": {"thermal": {"available": False, "unavailable_reasons": ["no CUDA"]},
                         "floor": {"measured": False, "reason": "no GPU"}},
             "gate": {"failures": []}, "plan": {"arms": [{"name": "a"}]}}, "incomplete",
     "INCOMPLETE: 1 of 4 boots finished",
     ["device cpu", "thermal gate unavailable: no CUDA", "decode floor not measured: no GPU"]),
    ("gpu-suite", {"ok": True, "steps": [{"step": "lint", "exit_code": 0, "wall_s": 3.0}],
                   "pytest": None}, "pass", "1 step, all exit 0", []),
    ("h200-model-runs", {"kind": "h200-model-runs", "ok": False, "headline": ["preflight: exit 0"],
                         "steps": [{"step": "preflight", "exit_code": 0, "wall_s": 3.0},
                                   {"step": "e2e", "exit_code": 3, "wall_s": 120.0},
                                   {"step": "invariance", "exit_code": 124, "wall_s": 90.0,
                                    "timed_out": True}]},
     "fail", "3 steps, 2 failed: e2e (exit 3), invariance (exit 124, timed out)", []),
    ("gsm8k", {"kind": "gsm8k", "summary": {"rows": 8, "correct": 6, "accuracy": 0.75,
                                           "answers": {"boxed": 8}, "stopped": 8,
                                           "output_tokens": 400},
               "key": {"model": "synthetic:tiny"}}, "info",
     "8 rows, 6 correct (75.0%); answers: boxed 8; 8 stopped, 400 output tokens", []),
    ("gsm8k", {"kind": "gsm8k", "ok": False, "headline": ["3 of 8 rows differ from the "
                                                          "fixture"],
               "summary": {"rows": 8}}, "fail", "3 of 8 rows differ from the fixture", []),
    ("fixed-work", {"kind": "fixed-work", "exit_code": 0, "verdict": "180/180 exact",
                    "skipped": "eager: not asked"}, "pass", "180/180 exact",
     ["eager: not asked"]),
], ids=["invariance-pass", "invariance-fail", "lint", "gemm-gate-failed", "cache-hit",
        "e2e-interrupted", "gpu-suite", "model-run-steps-failed", "gsm8k-run", "gsm8k-check-failed", "generic"])
def test_summarize(kind, data, status, headline, skipped):
    section = summarize(kind, data)
    assert section["status"] == status
    assert section["headline"][0] == headline
    assert section["skipped"] == skipped


def test_a_malformed_result_is_unreadable_not_a_crash():
    section = summarize("invariance", {"schema": "det-suite/invariance/1"})
    assert section["status"] == "unreadable"
    assert "could not read this invariance result: KeyError" in section["headline"][0]


def test_an_unknown_kind_without_a_headline_says_so():
    assert summarize("custom", {"kind": "custom"})["headline"] == ["(no headline in this result)"]
