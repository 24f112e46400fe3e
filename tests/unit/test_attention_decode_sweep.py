"""tools/attention_decode_sweep.py: its candidate launches of the decode attention give the
shipped bits, and its comparison can see a changed order.

The sweep times the arms on a GPU; on the CPU (Triton's interpreter) it runs the same op
through the same launcher seam at small heads, so what can be checked here is the bits:
every candidate arm equals the shipped split kernel (torch.equal), and the control arm, a
BLOCK_KV that cuts a segment's tiles elsewhere, differs.
"""

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "attention_decode_sweep.py"
HEADS = (4, 2, 16)     # query heads, KV heads (a GQA group of 2), head_dim


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location("det_suite_attention_decode_sweep", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def comparison(sweep, kernel_device):
    """Arms against the shipped one: two requests at a context of two segments and a bit
    (the second segment partly filled), where packing and tile order both matter."""
    call = sweep.DecodeCall(prefix=300, batch=2, heads=HEADS, device=kernel_device)
    result = sweep.compare_arms(call, list(sweep.ALL_ARMS))
    print({arm: row["differing_elements"] for arm, row in result.items()})
    return result


CANDIDATES = ["one-head", "stages-1", "stages-3", "warps-8", "block-q-16", "fold", "fold-pdl"]


@pytest.mark.parametrize("arm", CANDIDATES)
def test_a_candidate_gives_the_shipped_bits(comparison, arm):
    assert comparison[arm]["equal"], comparison[arm]


@pytest.mark.parametrize("prefix", [40, 300], ids=["one-segment", "two-segments"])
@pytest.mark.parametrize("quantize", [False, True], ids=["bf16-out", "fp8-out"])
def test_the_folded_attention_is_one_launch_with_the_shipped_bits(sweep, kernel_device,
                                                                   prefix, quantize):
    import torch

    from det_suite.ops.launch import split_k_counters

    call = sweep.DecodeCall(prefix=prefix, batch=2, heads=HEADS, device=kernel_device)
    out_scale = (torch.tensor([0.02], device=kernel_device) if quantize else None)

    def attention(launcher=None):
        extra = {} if launcher is None else {"launcher": launcher}
        return sweep.paged_attention(call.q, call.k, call.v, call.tables, call.context,
                                     call.starts, call.scale, out_scale=out_scale, **extra)

    fold = sweep.fold_launcher(pdl=False)
    folded, shipped = attention(fold), attention()
    assert fold.launches == ["bi_paged_attention_fold_kernel"]
    assert torch.equal(folded.view(torch.uint8), shipped.view(torch.uint8))
    # Every arrival counter re-armed: the next launch (a graph replay) starts from zero.
    assert not split_k_counters(call.q.device, 1).any()


def test_the_control_arm_is_flagged(comparison, sweep):
    assert not comparison[sweep.CONTROL]["equal"]


@pytest.mark.parametrize("arm", ["segment-128", "segment-64"])
def test_a_shorter_segment_decodes_as_a_prefill_at_that_segment(comparison, arm):
    assert comparison[arm]["equal"], comparison[arm]


@pytest.mark.parametrize("arm", ["segment-128", "segment-64"])
def test_a_shorter_segment_changes_the_bits(comparison, arm):
    # The proof the arm ran another order: a segment that left the bits alone proved nothing.
    assert comparison[arm]["must_change"] and comparison[arm]["changed"]


def test_the_segment_is_restored_after_an_arm(sweep):
    from det_suite.ops import bi_launch_spec

    with sweep.segment_tiles(64):
        assert bi_launch_spec.ATTENTION_COMBINE_TILE["SEGMENT"] == 64
    assert bi_launch_spec.ATTENTION_COMBINE_TILE["SEGMENT"] == sweep.ATTENTION_TILE["SEGMENT"]


def test_a_segment_that_cuts_a_tile_is_refused(sweep):
    with pytest.raises(ValueError, match="segment must be a multiple of BLOCK_KV"):
        with sweep.segment_tiles(96):
            pass


def test_an_unknown_arm_is_refused_by_name(sweep):
    with pytest.raises(ValueError, match="arm must be one of .*shipped.*'fastest'"):
        sweep.arm_launcher("fastest")


@pytest.mark.parametrize("argv, message", [
    (["out", "--arms", "shipped,fastest"], "unknown arm"),
    (["out", "--prefix", "128,x"], "comma-separated integers"),
    (["out", "--batch", "0"], "integers >= 1"),
])
def test_the_command_line_refuses_what_it_cannot_run(sweep, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(argv + ["--device", "cpu"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
