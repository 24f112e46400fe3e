"""The CUDA Graph decode step's packed inputs (`engine.graphs.DecodeInputs`): one byte buffer
whose views are the graph's static inputs, filled for a step with exactly what the eager
`build_step` packs for the same sequences, plus scratch padding rows; a run of steps staged
at once, each step what the eager step packs once the sequences are that many tokens
further. No model needed."""

import pytest
import torch

from det_suite.engine.graphs import DecodeInputs
from det_suite.engine.kv_cache import SCRATCH_PAGE
from det_suite.engine.scheduler import Sequence, build_step, decode_chunks

FIELDS = ("token_ids", "positions", "slot_mapping", "context_lens", "logit_rows")
WIDTH = 6


def _decoding(prompt_len: int, generated: int, pages: list[int], seed: int) -> Sequence:
    """A sequence `generated` tokens into decode: all but its last token in the cache."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 1000, (prompt_len + generated,), generator=gen).tolist()
    seq = Sequence(prompt=tuple(tokens[:prompt_len]), max_new_tokens=generated + 1,
                   first_logprob=1, pages=pages, cached=0)
    seq.output = tokens[prompt_len:]
    seq.logprobs = [0.0] * generated
    seq.computed = seq.length - 1
    return seq


# (prompt length, tokens generated, pages) per sequence; page size 4.
CASES = {
    "one-row-one-page": [(2, 1, [3])],
    "one-row-across-pages": [(7, 2, [5, 2, 9])],
    "rows-with-different-page-counts": [(3, 1, [1]), (9, 3, [4, 6, 8]), (4, 1, [7, 2])],
    "last-token-opens-a-page": [(4, 1, [2, 3]), (8, 1, [5, 6, 7])],
}


@pytest.mark.parametrize("size", [3, 8], ids=lambda s: f"graph-size-{s}")
@pytest.mark.parametrize("specs", CASES.values(), ids=CASES.keys())
def test_packed_step_equals_the_eager_step(specs, size):
    seqs = [_decoding(*spec, seed=i) for i, spec in enumerate(specs)]
    eager = build_step(decode_chunks(seqs), 4, "cpu").batch
    inputs = DecodeInputs(size, WIDTH, 4, "cpu")
    inputs.pack(seqs)
    staged, rows = inputs.staged, len(seqs)
    for name in FIELDS:
        assert torch.equal(getattr(staged, name)[:rows], getattr(eager, name)), name
    assert torch.equal(staged.query_starts[:rows + 1], eager.query_starts)
    cols = eager.block_tables.shape[1]
    assert torch.equal(staged.block_tables[:rows, :cols], eager.block_tables)
    assert (staged.block_tables[:rows, cols:] == SCRATCH_PAGE).all()


def test_padding_rows_point_at_the_scratch_page_with_no_context():
    inputs = DecodeInputs(4, WIDTH, 4, "cpu")
    inputs.pack([_decoding(5, 1, [2, 3], seed=0)])
    staged = inputs.staged
    assert staged.token_ids[1:].tolist() == [0, 0, 0]
    assert staged.positions[1:].tolist() == [0, 0, 0]
    assert staged.context_lens[1:].tolist() == [0, 0, 0]
    assert staged.slot_mapping[1:].tolist() == [SCRATCH_PAGE] * 3
    assert (staged.block_tables[1:] == SCRATCH_PAGE).all()
    assert staged.query_starts.tolist() == [0, 1, 2, 3, 4]
    assert staged.logit_rows.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("before, after", [
    pytest.param([0, 1, 2], [2], id="row-taken-by-another-sequence"),
    pytest.param([0, 1, 2], [0], id="rows-freed"),
    pytest.param([0], [1, 0], id="rows-swapped-and-grown"),
])
def test_repacking_rewrites_block_tables_whose_sequence_changed(before, after):
    seqs = [_decoding(3, 1, [1], seed=0), _decoding(9, 2, [4, 6, 8], seed=1),
            _decoding(5, 1, [7, 2], seed=2)]
    inputs = DecodeInputs(4, WIDTH, 4, "cpu")
    inputs.pack([seqs[i] for i in before])
    inputs.pack([seqs[i] for i in after])
    fresh = DecodeInputs(4, WIDTH, 4, "cpu")
    fresh.pack([seqs[i] for i in after])
    assert torch.equal(inputs.host, fresh.host)


def test_the_static_inputs_are_views_of_one_buffer():
    inputs = DecodeInputs(2, WIDTH, 4, "cpu")
    lo, hi = inputs.buffer.data_ptr(), inputs.buffer.data_ptr() + inputs.buffer.numel()
    for name in FIELDS + ("query_starts", "block_tables"):
        field = getattr(inputs.batch, name)
        assert lo <= field.data_ptr() < hi and field.data_ptr() + field.nbytes <= hi, name


def test_upload_and_loading_step_0_make_the_static_inputs_equal_the_staged_ones():
    inputs = DecodeInputs(2, WIDTH, 4, "cpu")
    inputs.pack([_decoding(6, 2, [3, 5], seed=0), _decoding(2, 1, [4], seed=1)])
    inputs.upload()
    inputs.load_step(0)
    for name in FIELDS + ("query_starts", "block_tables"):
        assert torch.equal(getattr(inputs.batch, name), getattr(inputs.staged, name)), name


def _advanced(seq: Sequence, tokens: list[int]) -> Sequence:
    """`seq` once it has generated `tokens` more (their K/V written but the last's)."""
    ahead = Sequence(prompt=seq.prompt, max_new_tokens=seq.max_new_tokens + len(tokens),
                     first_logprob=1, pages=seq.pages, cached=0)
    ahead.output = seq.output + tokens
    ahead.computed = ahead.length - 1
    return ahead


@pytest.mark.parametrize("steps", [2, 5], ids=lambda n: f"{n}-steps")
@pytest.mark.parametrize("specs", CASES.values(), ids=CASES.keys())
def test_a_staged_run_loads_each_step_as_the_eager_step_of_the_advanced_sequences(specs, steps):
    """Step j of a run: what build_step packs once every sequence is j tokens further,
    except the tokens, which the previous replay writes (here: written by hand)."""
    page_size = 4
    seqs = [_decoding(p, g, pages + [10 + 3 * i + n for n in range(3)], seed=i)
            for i, (p, g, pages) in enumerate(specs)]
    inputs = DecodeInputs(8, WIDTH + 4, page_size, "cpu")
    inputs.pack(seqs)
    inputs.stage_steps(steps)
    inputs.upload()
    fed = torch.randint(0, 1000, (steps, len(seqs))).tolist()
    for step in range(steps):
        if step:
            inputs.batch.token_ids[:len(seqs)] = torch.tensor(fed[step - 1])
        inputs.load_step(step)
        ahead = [_advanced(seq, [fed[j][r] for j in range(step)]) for r, seq in enumerate(seqs)]
        eager = build_step(decode_chunks(ahead), page_size, "cpu").batch
        for name in FIELDS:
            assert torch.equal(getattr(inputs.batch, name)[:len(seqs)],
                               getattr(eager, name)), (step, name)
        assert (inputs.batch.slot_mapping[len(seqs):] == SCRATCH_PAGE).all()
        assert (inputs.batch.context_lens[len(seqs):] == 0).all()


@pytest.mark.parametrize("steps", [0, -1, True, 2.0], ids=repr)
def test_a_run_of_no_steps_is_refused_by_name(steps):
    inputs = DecodeInputs(2, WIDTH, 4, "cpu")
    inputs.pack([_decoding(2, 1, [1], seed=0)])
    with pytest.raises(ValueError, match="steps"):
        inputs.stage_steps(steps)


def test_download_returns_each_steps_tokens_and_the_exact_logprob_bits():
    inputs = DecodeInputs(3, WIDTH, 4, "cpu")
    inputs.pack([_decoding(2, 1, [1, 2], seed=0)])
    inputs.stage_steps(2)
    values = torch.tensor([[-0.1, -3.0e-8, -17.25], [-2.5, -0.0, -1e-30]], dtype=torch.float32)
    tokens = torch.tensor([[7, 151935, 0], [3, 4, 5]], dtype=torch.int32)
    for step in range(2):
        inputs.picked[0] = tokens[step]
        inputs.picked[1] = values[step].view(torch.int32)
        inputs.keep_picks(step)
    run = inputs.download(2)
    assert [t for t, _ in run] == [[7, 151935], [3, 4]]
    for step, (_, logprobs) in enumerate(run):
        assert torch.equal(torch.tensor(logprobs, dtype=torch.float32), values[step, :2])


@pytest.mark.parametrize("computed", [3, 5], ids=["prompt-not-written", "last-token-written"])
def test_a_row_that_is_not_a_decode_row_is_refused(computed):
    seq = _decoding(4, 1, [1, 2], seed=0)          # length 5: decode needs computed == 4
    seq.computed = computed
    with pytest.raises(RuntimeError, match="decode"):
        DecodeInputs(2, WIDTH, 4, "cpu").pack([seq])


@pytest.mark.parametrize("count", [0, 3], ids=["no-rows", "more-rows-than-size"])
def test_a_batch_outside_the_size_is_refused_by_name(count):
    seqs = [_decoding(2, 1, [1], seed=i) for i in range(count)]
    with pytest.raises(ValueError, match="seqs"):
        DecodeInputs(2, WIDTH, 4, "cpu").pack(seqs)


def test_a_run_keeps_one_copy_of_the_block_tables():
    """A run never changes its block tables, so its buffers hold them once, not per step:
    a long generation's staging grows with its steps' few fields only."""
    width, steps = 512, 64
    inputs = DecodeInputs(8, width, 4, "cpu")
    inputs.pack([_decoding(2, 1, [1], seed=0)])
    inputs.stage_steps(steps)
    tables = 8 * width * 4
    assert inputs.run_host.numel() == tables + steps * (inputs.nbytes - tables)
    assert inputs.run_host.numel() < steps * inputs.nbytes // 10   # vs. tables per step
