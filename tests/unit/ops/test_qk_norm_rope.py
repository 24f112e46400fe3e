"""`qk_norm_rope_write`: an attention block's q/k RMSNorm, RoPE and KV-cache write in one
launch, bit for bit the unfused sequence it replaces (`rms_norm` on q and k,
`models.qwen3.apply_rope`, `write_kv`): the same bytes in q_out and in every slot of both
caches, zero signs included. Rows are batch-invariant; bad input is refused before launch.
The GPU tests repeat the identity at Qwen3-8B's head shapes, eager and in a CUDA graph."""

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from det_suite.kernels import registry
from det_suite.lint import op_kernels, specialize
from det_suite.lint.standins import bind_call, contiguous
from det_suite.lint.worker import WORKER_FLAG, WORKER_MODULE, worker_env
from det_suite.models.catalog import model_dims
from det_suite.models.qwen3 import apply_rope, rope_table
from det_suite.ops import run_kernel
from det_suite.ops.batch_invariant import qk_norm_rope_write, rms_norm, write_kv
from det_suite.ops.bi_launch_spec import QK_NORM_ROPE_TILE, RMSNORM_TILE, rmsnorm_launch_spec
from tests.unit.lint.test_policy_lint import _recorded_job, _Recorder

EPS = 1e-6
BLOCKS, PAGE = 6, 4
KERNEL = "bi_qk_norm_rope_kernel"


def _values(shape, dtype, g, device, scale=1.0):
    """Normal values with exact zeros of both signs sprinkled in: a zero product's sign is
    where a rotation written as 0 - x instead of -x would show."""
    x = torch.randn(*shape, generator=g) * scale
    x[torch.rand(*shape, generator=g) < 0.1] = 0.0
    x[torch.rand(*shape, generator=g) < 0.05] = -0.0
    return x.to(dtype).to(device)


def _slots(tokens, g, device, num_slots):
    """Distinct slots scattered over the pages, the cache's last slot among them."""
    slots = torch.randperm(num_slots, generator=g)[:tokens]
    if tokens and num_slots - 1 not in slots:
        slots[tokens // 2] = num_slots - 1
    return slots.to(device)


def _inputs(tokens, q_heads, kv_heads, head_dim, dtype, device, *, seed=0, blocks=BLOCKS,
            page=PAGE, cos_sin=None):
    """The op's keyword arguments; caches start filled, so untouched slots are checked too."""
    g = torch.Generator().manual_seed(seed)
    if cos_sin is None:
        cos_sin = (_values((tokens, head_dim), dtype, g, device),
                   _values((tokens, head_dim), dtype, g, device))
    return dict(
        q=_values((tokens, q_heads, head_dim), dtype, g, device),
        k=_values((tokens, kv_heads, head_dim), dtype, g, device, scale=4.0),
        v=_values((tokens, kv_heads, head_dim), dtype, g, device),
        q_weight=_values((head_dim,), dtype, g, device),
        k_weight=_values((head_dim,), dtype, g, device),
        eps=EPS, cos=cos_sin[0], sin=cos_sin[1],
        k_cache=_values((blocks, page, kv_heads, head_dim), dtype, g, device),
        v_cache=_values((blocks, page, kv_heads, head_dim), dtype, g, device),
        slot_mapping=_slots(tokens, g, device, blocks * page))


def _unfused(q, k, v, q_weight, k_weight, eps, cos, sin, k_cache, v_cache, slot_mapping):
    """The sequence the op replaces (models.qwen3's attention block before this op)."""
    q = apply_rope(rms_norm(q, q_weight, eps), cos, sin)
    k = apply_rope(rms_norm(k, k_weight, eps), cos, sin)
    write_kv(k, v, k_cache, v_cache, slot_mapping)
    return q


def _run(fn, inputs, **kwargs):
    """(q_out, k_cache, v_cache) of fn on fresh copies of the caches."""
    args = dict(inputs, k_cache=inputs["k_cache"].clone(), v_cache=inputs["v_cache"].clone())
    return fn(**args, **kwargs), args["k_cache"], args["v_cache"]


def _same_bytes(a, b):
    """torch.equal on the bits (torch.equal alone takes -0.0 for +0.0)."""
    return a.dtype == b.dtype and torch.equal(a.view(torch.int16), b.view(torch.int16))


def _same_results(got, want):
    return all(_same_bytes(a, b) for a, b in zip(got, want, strict=True))


# ------------------------------------------------------------------ bit identity

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
HEADS = {"gqa-4-2": (4, 2), "mha-2-2": (2, 2)}
# Every (dtype, heads, D) at T = 1 and 3; T = 17 (programs enough for scattered pages) once
# per (dtype, heads), both head dims among them: the interpreter's time goes with T.
IDENTITY_CASES = [(d, t, h, hd) for d in DTYPES for t in (1, 3) for h in HEADS
                  for hd in (16, 64)] + [
    ("bf16", 17, "gqa-4-2", 64), ("fp16", 17, "gqa-4-2", 16), ("bf16", 17, "mha-2-2", 16),
    ("fp16", 17, "mha-2-2", 64)]


@pytest.mark.parametrize("dtype, tokens, heads, head_dim", IDENTITY_CASES,
                         ids=[f"{d}-T{t}-{h}-D{hd}" for d, t, h, hd in IDENTITY_CASES])
def test_matches_the_unfused_sequence(device, dtype, tokens, heads, head_dim):
    inputs = _inputs(tokens, *HEADS[heads], head_dim, DTYPES[dtype], device, seed=tokens)
    assert _same_results(_run(qk_norm_rope_write, inputs), _run(_unfused, inputs))


def test_column_views_of_one_fused_projection_give_the_contiguous_bits(device):
    """q, k and v as column views of one (T, (Hq + 2 Hkv) * D) q/k/v projection output (the
    det engine's segmented GEMM) give the bytes their contiguous copies give."""
    inputs = _inputs(3, 4, 2, 16, torch.bfloat16, device, seed=11)
    fused = torch.cat([inputs[name].flatten(1) for name in ("q", "k", "v")], dim=1)
    q, k, v = fused.split([4 * 16, 2 * 16, 2 * 16], dim=1)
    views = dict(inputs, q=q.view(3, 4, 16), k=k.view(3, 2, 16), v=v.view(3, 2, 16))
    assert not views["q"].is_contiguous()
    assert _same_results(_run(qk_norm_rope_write, views), _run(qk_norm_rope_write, inputs))


SUBSETS = {"one-token": slice(2, 3), "middle": slice(1, 4), "prefix": slice(0, 3)}


@pytest.mark.parametrize("rows", list(SUBSETS.values()), ids=list(SUBSETS))
def test_rows_of_a_call_equal_the_rows_computed_alone(device, rows):
    big = _inputs(5, 4, 2, 16, torch.bfloat16, device, seed=7)
    small = dict(big, **{name: big[name][rows] for name in
                         ("q", "k", "v", "cos", "sin", "slot_mapping")})
    q_big, k_big, v_big = _run(qk_norm_rope_write, big)
    q_small, k_small, v_small = _run(qk_norm_rope_write, small)
    flat_slots = small["slot_mapping"]
    assert _same_bytes(q_small, q_big[rows])
    for alone, together in ((k_small, k_big), (v_small, v_big)):
        assert _same_bytes(alone.flatten(0, 1)[flat_slots], together.flatten(0, 1)[flat_slots])


def test_rope_rounded_once_is_flagged(device):
    """Positive control: RoPE with one rounding at the end (fp32 products and sum) differs
    from apply_rope's op-by-op roundings on this data, so the identity above is not
    vacuous about them."""
    inputs = _inputs(17, 4, 2, 64, torch.bfloat16, device, seed=3)
    normed = rms_norm(inputs["q"], inputs["q_weight"], EPS)
    cos, sin = inputs["cos"].float()[:, None], inputs["sin"].float()[:, None]
    x, half = normed.float(), normed.shape[-1] // 2
    rounded_once = (x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)
    assert not _same_bytes(rounded_once.to(normed.dtype),
                           apply_rope(normed, inputs["cos"], inputs["sin"]))


def test_zero_tokens_launch_nothing():
    recorder = _Recorder()
    inputs = _inputs(0, 4, 2, 16, torch.bfloat16, "cpu")
    q_out, k_cache, v_cache = _run(qk_norm_rope_write, inputs, launcher=recorder)
    assert q_out.shape == (0, 4, 16) and recorder.calls == []
    assert _same_bytes(k_cache, inputs["k_cache"]) and _same_bytes(v_cache, inputs["v_cache"])


# ------------------------------------------------------------------ launch

def _record_op(tokens):
    """The op's launch at the lint's shapes (Q_HEADS/KV_HEADS/HEAD_DIM, its cache)."""
    bf16, page = torch.bfloat16, 16
    recorder = _Recorder()
    heads, kv_heads, dim = op_kernels.Q_HEADS, op_kernels.KV_HEADS, op_kernels.HEAD_DIM
    q = torch.empty(tokens, heads, dim, dtype=bf16)
    kv = torch.empty(tokens, kv_heads, dim, dtype=bf16)
    rope = torch.empty(tokens, dim, dtype=bf16)
    weight = torch.empty(dim, dtype=bf16)
    cache = torch.empty(op_kernels.CACHE_BLOCKS, page, kv_heads, dim, dtype=bf16)
    qk_norm_rope_write(q, kv, kv, weight, weight, EPS, rope, rope, cache, cache,
                       torch.zeros(tokens, dtype=torch.int64), launcher=recorder)
    return recorder.calls


def test_the_norm_is_launched_with_the_rmsnorm_tile():
    """What makes the sums of squares compile to bi_rmsnorm_kernel's reduction tree."""
    assert QK_NORM_ROPE_TILE.kernel == KERNEL
    assert (QK_NORM_ROPE_TILE.tile, QK_NORM_ROPE_TILE.num_warps) == \
        (RMSNORM_TILE.tile, RMSNORM_TILE.num_warps)


def test_the_launch_keeps_the_rope_roundings_apart():
    """Compiled without FMA contraction: LLVM narrows RoPE's fp32 ops to bf16/fp16 ones,
    which the backend would otherwise fuse into an FMA that skips the product's rounding
    (the norm's sum of squares is an explicit tl.fma, unchanged by this)."""
    (recorded,) = _record_op(1)
    assert recorded[3]["enable_fp_fusion"] is False


@pytest.mark.parametrize("tokens", op_kernels.ROW_COUNTS, ids=lambda t: f"T{t}")
def test_lint_launch_mirrors_the_op(tokens):
    (recorded,) = _record_op(tokens)
    assert recorded[0] is registry.kernel(KERNEL)
    launches = dict(op_kernels.op_kernel_launches(KERNEL))
    assert _recorded_job(recorded) == specialize(launches[f"M={tokens}"],
                                                 registry.entry(KERNEL).module, KERNEL, 90)


def _compiled_ptx(jobs, tmp_path) -> list[str]:
    """PTX of compile jobs, from the lint's own compile worker (a process without the
    interpreter, which compiles and stops at PTX)."""
    jobs_path, out_path = tmp_path / "jobs.json", tmp_path / "out.json"
    jobs_path.write_text(json.dumps([job.to_json() for job in jobs]))
    subprocess.run([sys.executable, "-m", WORKER_MODULE, WORKER_FLAG, str(jobs_path),
                    str(out_path), str(tmp_path / "ptx")], env=worker_env(), check=True)
    results = json.loads(out_path.read_text())
    assert all(r["ok"] for r in results), [r["error"] for r in results]
    return [Path(r["ptx_path"]).read_text() for r in results]


def _sum_of_squares(ptx: str) -> list[str]:
    """The float, shuffle and shared-memory instructions from the first squared lane (the
    FMA) to inv_rms (the second division), registers renamed in order of appearance:
    the reduction tree as data flow. `.rn` on an add without a multiply to contract
    with changes nothing and is dropped."""
    lines = [line.strip() for line in ptx.splitlines()
             if re.search(r"f32|shfl|shared", line) and not line.strip().startswith(".loc")]
    start = next(i for i, line in enumerate(lines) if line.startswith("fma.rn.f32"))
    names: dict[str, str] = {}
    out = []
    for line in lines[start:]:
        out.append(re.sub(r"%[a-z]+[0-9]+", lambda m: names.setdefault(m[0], f"v{len(names)}"),
                          line).replace("add.rn.f32", "add.f32"))
        if line.startswith("div.full.f32") and sum(o.startswith("div") for o in out) == 2:
            return out
    raise AssertionError("no inv_rms division after the sum of squares")


def test_the_norm_compiles_to_bi_rmsnorm_kernels_reduction(tmp_path):
    """On sm_90 at Qwen3-8B's head_dim (the lint's stand-ins), the q/k norm's sum of squares
    is bi_rmsnorm_kernel's instruction for instruction: the H200 bits of the two norms can
    only agree if their reduction trees do, and the interpreter cannot show that."""
    tokens = op_kernels.ROW_COUNTS[1]
    fused = specialize(dict(op_kernels.op_kernel_launches(KERNEL))[f"M={tokens}"],
                       registry.entry(KERNEL).module, KERNEL, 90)
    rows = tokens * op_kernels.Q_HEADS
    bf16 = torch.bfloat16
    norm_launch = bind_call(rmsnorm_launch_spec(rows, op_kernels.HEAD_DIM, EPS),
                            dict(x=contiguous(bf16, rows, op_kernels.HEAD_DIM),
                                 weight=contiguous(bf16, op_kernels.HEAD_DIM),
                                 out=contiguous(bf16, rows, op_kernels.HEAD_DIM)))
    norm = specialize(norm_launch, registry.entry("bi_rmsnorm_kernel").module,
                      "bi_rmsnorm_kernel", 90)
    fused_ptx, norm_ptx = _compiled_ptx([fused, norm], tmp_path)
    assert _sum_of_squares(fused_ptx) == _sum_of_squares(norm_ptx)
    assert not re.search(r"fma\.rn\.(bf16|f16)", fused_ptx)  # RoPE's roundings stay apart


# ------------------------------------------------------------------ bad input

def _bad(**changes):
    """The op's call on valid CPU inputs (T=2, Hq=4, Hkv=2, D=16) with `changes` applied:
    a value, or a function of the valid inputs."""
    def call(launcher):
        inputs = _inputs(2, 4, 2, 16, torch.bfloat16, "cpu")
        for name, change in changes.items():
            inputs[name] = change(inputs) if callable(change) else change
        return qk_norm_rope_write(**inputs, launcher=launcher)
    return call


def _strided(t):
    """t's values in a non-contiguous tensor of t's shape."""
    return t.transpose(0, 1).contiguous().transpose(0, 1)


def _strided_last(t):
    """t's values in a tensor of t's shape whose last dimension is not contiguous."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


BAD_INPUT = {
    "q-not-a-tensor": (_bad(q=lambda i: i["q"].tolist()), TypeError, "q must be a torch.Tensor"),
    "q-fp32": (_bad(q=lambda i: i["q"].float()), TypeError, "q must have dtype bfloat16"),
    "q-2d": (_bad(q=lambda i: i["q"].flatten(1)), ValueError, r"q must be 3-D \(T, Hq, D\)"),
    "k-dtype": (_bad(k=lambda i: i["k"].half()), TypeError, "k must have q's dtype"),
    "v-heads": (_bad(v=lambda i: i["v"][:, :1]), ValueError, r"v must be \(T, Hkv, D\)"),
    "k-tokens": (_bad(k=lambda i: i["k"][:1], v=lambda i: i["v"][:1]), ValueError,
                 r"k must be \(T, Hkv, D\) = \(2, 2, 16\)"),
    "odd-head-dim": (_bad(**{n: (lambda i, n=n: i[n][..., :15]) for n in ("q", "k", "v")}),
                     ValueError, "head_dim .* must be even"),
    "q-strided": (_bad(q=lambda i: _strided_last(i["q"])), ValueError,
                  "q must be contiguous along its last dimension"),
    "q-weight-shape": (_bad(q_weight=lambda i: i["q_weight"][:8]), ValueError,
                       r"q_weight must be \(D,\)"),
    "k-weight-dtype": (_bad(k_weight=lambda i: i["k_weight"].float()), TypeError,
                       "k_weight must have q_weight's dtype"),
    "eps-negative": (_bad(eps=-1.0), ValueError, "eps must be a non-negative float"),
    "cos-fp32": (_bad(cos=lambda i: i["cos"].float()), TypeError, "cos must have q's dtype"),
    "sin-shape": (_bad(sin=lambda i: i["sin"][:, :8]), ValueError, r"sin must be \(T, D\)"),
    "k-cache-heads": (_bad(k_cache=lambda i: torch.cat([i["k_cache"]] * 2, dim=2)),
                      ValueError, r"k_cache must be \(num_blocks, block_size, 2, 16\)"),
    "v-cache-blocks": (_bad(v_cache=lambda i: i["v_cache"][:2]), ValueError,
                       "v_cache shape .* differs from k_cache's"),
    "k-cache-strided": (_bad(k_cache=lambda i: _strided(i["k_cache"])), ValueError,
                        "k_cache must be contiguous"),
    "slot-int32": (_bad(slot_mapping=lambda i: i["slot_mapping"].int()), TypeError,
                   "slot_mapping must have dtype int64"),
    "slot-count": (_bad(slot_mapping=lambda i: i["slot_mapping"][:1]), ValueError,
                   r"slot_mapping must be \(T,\)"),
    "slot-past-the-cache": (_bad(slot_mapping=torch.tensor([0, BLOCKS * PAGE])), ValueError,
                            f"slot_mapping must name slots 0..{BLOCKS * PAGE - 1}"),
    "slot-negative": (_bad(slot_mapping=torch.tensor([-1, 0])), ValueError,
                      "slot_mapping must name slots"),
    "cos-elsewhere": (_bad(cos=lambda i: i["cos"].to("meta")), ValueError, "cos is on meta"),
}


@pytest.mark.parametrize("call, error, match", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_names_the_argument_before_any_launch(call, error, match):
    recorder = _Recorder()
    with pytest.raises(error, match=match):
        call(recorder)
    assert recorder.calls == []


# ------------------------------------------------------------------ GPU, Qwen3-8B heads

DIMS = model_dims("qwen3-8b")


def _qwen3_inputs(tokens, seed=0):
    """Qwen3-8B's heads, its RoPE table at scattered positions, 16-token pages."""
    config = SimpleNamespace(head_dim=DIMS.head_dim, rope_parameters={"rope_theta": 1e6})
    cos, sin = rope_table(config, 4096, "cuda", torch.bfloat16)
    positions = torch.randint(0, 4096, (tokens,),
                              generator=torch.Generator().manual_seed(seed)).to("cuda")
    return _inputs(tokens, DIMS.heads, DIMS.kv_heads, DIMS.head_dim, torch.bfloat16, "cuda",
                   seed=seed, blocks=64, page=16, cos_sin=(cos[positions], sin[positions]))


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 7, 300], ids=lambda t: f"T{t}")
def test_matches_the_unfused_sequence_at_qwen3_8b_heads(tokens):
    inputs = _qwen3_inputs(tokens, seed=tokens)
    assert _same_results(_run(qk_norm_rope_write, inputs), _run(_unfused, inputs))


@pytest.mark.gpu
def test_fma_contraction_is_flagged_at_qwen3_8b_heads():
    """Positive control: the same kernel compiled with FMA contraction (the RoPE's product
    fused into its add) differs from the unfused sequence, so the test above can fail."""
    inputs = _qwen3_inputs(300, seed=300)
    fused = lambda k, c, a, kw: run_kernel(k, c, a, {**kw, "enable_fp_fusion": True})  # noqa: E731
    assert not _same_results(_run(qk_norm_rope_write, inputs, launcher=fused),
                             _run(_unfused, inputs))


@pytest.mark.gpu
@pytest.mark.graph
def test_graph_replay_equals_the_unfused_sequence_at_qwen3_8b_heads():
    """A decode step of 4 tokens captured in a CUDA graph (the grid is the shapes', so the
    launch needs no device value): its replay writes what the unfused sequence writes."""
    inputs = _qwen3_inputs(4, seed=4)
    static = dict(inputs, k_cache=inputs["k_cache"].clone(), v_cache=inputs["v_cache"].clone())
    qk_norm_rope_write(**static)  # warm-up (compiles) before capture
    torch.cuda.synchronize()
    static["k_cache"].copy_(inputs["k_cache"])
    static["v_cache"].copy_(inputs["v_cache"])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q_out = qk_norm_rope_write(**static)
    graph.replay()
    torch.cuda.synchronize()
    assert _same_results((q_out, static["k_cache"], static["v_cache"]), _run(_unfused, inputs))
