"""bench gemm's accuracy probe: error against an fp64 product of the same quantized operands,
det-suite beside cuBLAS's default, and the gate on their ratio (bench/gemm/fp64_error.py)."""

import pytest
import torch

from det_suite.bench.gemm import GemmShape
from det_suite.bench.gemm.fp64_error import Fp64Error, measure_fp64_error, probe_operands
from det_suite.bench.gemm.render import fmt_error
from det_suite.bench.gemm.results import CellResult, gate_failures, summarize


def exact_gemm(a, w_kn, a_scale, w_scale):
    return ((a.double() @ w_kn.double()) * (float(a_scale) * float(w_scale))).to(torch.bfloat16)


def truncating_gemm(a, w_kn, a_scale, w_scale):
    """An accumulator that drops low bits: what an unpromoted MMA looks like, exaggerated."""
    out = exact_gemm(a, w_kn, a_scale, w_scale).float()
    return (out * (1 - 2.0 ** -6)).to(torch.bfloat16)


def test_probe_operands_have_positive_means_so_partial_sums_grow():
    a, w_kn, _, _ = probe_operands(8, 16, 256, generator=torch.Generator().manual_seed(0),
                                   device="cpu")
    assert a.dtype == w_kn.dtype == torch.float8_e4m3fn
    assert float(a.float().min()) > 0 and 0.15 < float(w_kn.float().mean()) < 0.35


def test_an_exact_gemm_sits_on_the_rounding_floor():
    error = measure_fp64_error(4, 32, 256, det=exact_gemm, reference=exact_gemm,
                               generator=torch.Generator().manual_seed(1), device="cpu",
                               out_dtype=torch.bfloat16)
    assert error.det == error.reference == pytest.approx(error.rounding)
    assert error.ratio == 1.0


def test_a_lossy_accumulator_is_flagged_by_its_ratio():
    error = measure_fp64_error(4, 32, 256, det=truncating_gemm, reference=exact_gemm,
                               generator=torch.Generator().manual_seed(1), device="cpu",
                               out_dtype=torch.bfloat16)
    assert error.ratio > 2


def _cell(shape, m, ratio):
    cell = CellResult("graph", shape, m, det_us=1.0, vendor_us={"torch_scaled_mm": 1.0})
    cell.fp64_error = Fp64Error(det=ratio * 1e-3, reference=1e-3, rounding=1e-3).to_json()
    return cell


def test_summary_names_the_worst_error_cell_and_the_gate_fails_on_it():
    shape = GemmShape("s", 64, 4096)
    summary = summarize("graph", [_cell(shape, 1, 1.0), _cell(shape, 128, 1.3)])
    assert (summary.worst_error_ratio, summary.worst_error_m) == (pytest.approx(1.3), 128)
    failures = gate_failures({"graph": summary}, max_geomean=None, max_cell=None,
                             max_error_ratio=1.1)
    assert len(failures) == 1 and "M=128" in failures[0] and "1.30x" in failures[0]
    assert gate_failures({"graph": summary}, max_geomean=None, max_cell=None,
                         max_error_ratio=1.5) == []


def test_markdown_cell_shows_both_errors_and_the_ratio():
    assert fmt_error(_cell(GemmShape("s", 64, 4096), 1, 1.25)) == "1.25e-03 / 1.00e-03 (1.25x)"
    assert fmt_error(None) == "-"
