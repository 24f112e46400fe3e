"""The fused norm + GEMM prototype inside a whole decode step (issue 15, H200).

`tools/fused_norm_gemm_sweep.py` measured one launch pair at a time: at M = 1 its fused
kernel (the GEMM's programs doing the residual add, the RMSNorm and the quantization of their
activation) gave the shipped bits, and won on gate_up (29.60 -> 27.60 us) and lost on qkv
(9.79 -> 12.11 us); the SiLU product's quantization can move into the down projection the
same way. What a step gains is a measurement of the step: this builds the engine with det
mode's op set, the producers and GEMMs replaced by the prototype where the arm says, and times
the batch-1 CUDA Graph decode step as `tools/profile_decode.py` does:

- shipped:             det mode as shipped
- fused-gate-up:       the post-attention residual add + norm fused into the gate/up GEMM
- fused-down:          the SiLU product + quantization fused into the down GEMM
- fused-gate-up+down:  both
- fused-all:           also the input norm (with the previous residual add) into q/k/v

Only batch-1 decode calls fuse (one row: the prototype rounds the live row once per program,
`ONE_ROW`); prefill and larger batches run the shipped ops. Per arm: whether a fixed greedy
generation (ids and logprobs, CHECK_TOKENS tokens) is the shipped arm's bit for bit, and per
prefix the graph replay and the host-timed step. The control arm (`control-unrounded`: the
norm weight applied before the bf16 rounding) must change the generation's bits.

On a CPU (`--device cpu`, Triton's interpreter, `synthetic:tiny-wide`, the SM90 tables so the
decode tiles are the swapped kernel the prototype extends) it checks the bits only: the unit
test runs that.

Developer tool: writes fused_decode.json and fused_decode.md into OUT_DIR.
    python tools/fused_decode_sweep.py OUT_DIR [--model synthetic:qwen3-8b?seed=0]
        [--prefix 128,2048] [--tokens 32] [--arms shipped,fused-gate-up,...] [--device cpu]
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from det_suite.bench.sweep_cli import (control_verdict, cpu_requested, finish, load_tool,
                                       parse_step_args, step_columns)

if __name__ == "__main__" and cpu_requested(sys.argv[1:]):
    # The interpreter must be chosen before Triton is imported (platform/interpreter.py).
    from det_suite.platform.interpreter import use_interpreter
    use_interpreter()

import torch  # noqa: E402 - after the interpreter switch

from det_suite.backends.interface import Request  # noqa: E402
from det_suite.engine import Engine  # noqa: E402
from det_suite.engine.opsets import det_opset  # noqa: E402
from det_suite.models.spec import load_model  # noqa: E402
from det_suite.ops import linear as linear_ops  # noqa: E402
from det_suite.policy import shipped_policy  # noqa: E402

ARMS = ("shipped", "fused-gate-up", "fused-down", "fused-gate-up+down", "fused-all",
        "control-unrounded")
CONTROL = "control-unrounded"
DOWN = "down"
# Arm -> (what is fused: stacked groups by member count, 2 gate/up and 3 q/k/v, and DOWN;
# whether each producer rounds where the shipped one does: the control does not).
ARM_FUSES = {"shipped": ((), True), "fused-gate-up": ((2,), True), "fused-down": ((DOWN,), True),
             "fused-gate-up+down": ((2, DOWN), True), "fused-all": ((2, 3, DOWN), True),
             "control-unrounded": ((2, 3, DOWN), False)}
CHECK_TOKENS = 16


def sibling(name: str):
    """tools/<name>.py as a module: the prototype (fused_norm_gemm_sweep), the step timing
    (profile_decode)."""
    return load_tool(Path(__file__).with_name(f"{name}.py"))


@dataclass(frozen=True)
class PendingProduct:
    """The down projection's input whose SiLU product runs inside its GEMM: gate and up
    (1, I), the two halves of the gate/up output."""

    gate: torch.Tensor
    up: torch.Tensor
    config: object          # the down projection's launch config at one row


@dataclass(frozen=True)
class PendingNorm:
    """A stacked group's input whose norm runs inside its GEMM: x (1, K), delta (or None),
    the norm's weight and eps, the residual sum buffer the GEMM writes (x without delta) and
    the group's launch config at one row."""

    x: torch.Tensor
    delta: torch.Tensor | None
    weight: torch.Tensor
    eps: float
    summed: torch.Tensor
    config: object


def fused_opset(arm: str, prototype) -> tuple:
    """(op set, launches): det mode's op set with the arm's stacked groups normalised inside
    their GEMM at batch-1 decode (one row), the shipped ops everywhere else; `launches`
    counts the fused launches it made (launches["fused"]), so a comparison can prove the
    fused path ran before it claims equality."""
    groups, round_normed = ARM_FUSES[arm]
    det = det_opset()
    launches = {"fused": 0}
    if not groups:
        return det, launches

    def config_for(rows: int, linear):
        n, k = linear.weight.shape
        return linear_ops.device_policy(linear.weight.device).select(rows, n, k)

    def norm_for_group(x, delta, weight, eps, group):
        if len(group.members) in groups and x.dim() == 2 and x.shape[0] == 1:
            config = config_for(1, group)
            if prototype.fuses(config):
                summed = torch.empty_like(x) if delta is not None else x
                return summed, PendingNorm(x, delta, weight, eps, summed, config)
        return det.norm_for_group(x, delta, weight, eps, group)

    def group_linear(inputs, group, dtype):
        if not isinstance(inputs, PendingNorm):
            return det.group_linear(inputs, group, dtype)
        launches["fused"] += 1
        out, _summed = prototype.norm_quantize_gemm(
            inputs.x, inputs.delta, inputs.weight, inputs.eps, group.weight,
            group.input_scales, group.weight_scales, prototype.segment_ends(group.widths),
            inputs.config, summed=inputs.summed, out_dtype=dtype, round_normed=round_normed)
        return out.split(group.widths, dim=-1)

    def gated_for_linear(gate, up, lin):
        if DOWN in groups and gate.dim() == 2 and gate.shape[0] == 1 and lin.bias is None:
            config = config_for(1, lin)
            if prototype.fuses(config):
                return PendingProduct(gate, up, config)
        return det.gated_for_linear(gate, up, lin)

    def fp8_linear(x, lin):
        if not isinstance(x, PendingProduct):
            return det.fp8_linear(x, lin)
        launches["fused"] += 1
        return prototype.silu_mul_quantize_gemm(
            x.gate, x.up, lin.weight, lin.input_scale, lin.weight_scale, x.config,
            out_dtype=x.gate.dtype, round_silu=round_normed)

    return replace(det, name=f"det-{arm}", norm_for_group=norm_for_group,
                   group_linear=group_linear, gated_for_linear=gated_for_linear,
                   fp8_linear=fp8_linear), launches


@contextlib.contextmanager
def sm90_tables():
    """Every GEMM on the SM90 table (the CPU run: the prototype extends SM90's swapped
    decode tile, and both arms must reduce with one table to be compared)."""
    real = linear_ops._device_policy
    table = shipped_policy("sm90")
    linear_ops._device_policy = lambda _type, _index: table.on_device(None)
    try:
        yield
    finally:
        linear_ops._device_policy = real


def generation(engine: Engine, prompt, tokens: int = CHECK_TOKENS) -> dict:
    """A greedy generation's ids and logprobs (as hex: bit for bit)."""
    engine.flush_cache()
    (done,) = engine.generate([Request(prompt_ids=prompt, max_new_tokens=tokens,
                                       logprobs_from=1)])
    return {"ids": list(done.output_ids), "logprobs": [float(v).hex() for v in done.logprobs]}


def run_arm(ckpt, arm: str, prototype, *, device, cuda_graph: bool, prompt,
            tokens: int = CHECK_TOKENS) -> tuple:
    """(engine, its generation, fused launches it made) for one arm."""
    ops, launches = fused_opset(arm, prototype)
    engine = Engine(ckpt, mode="det", cuda_graph=cuda_graph, graph_batch_sizes=(1,),
                    max_seq_len=4096 if cuda_graph else 256, device=device, ops=ops)
    return engine, generation(engine, prompt, tokens), launches["fused"]


def _markdown(result: dict) -> str:
    lines = [f"# Fused norm + GEMM in the decode step ({result['device']}, {result['model']})",
             "", "Batch-1 CUDA Graph decode, det mode; ratio: arm / shipped.", "",
             "| arm | fused launches | prefix | replay ms | step ms | replay ratio | same bits |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    base = {c["prefix"]: c for c in result["arms"][0].get("cells", [])}
    for row in result["arms"]:
        same = ("yes" if row["equal"] else "NO") if row["ran_fused"] else "never fused"
        for cell in row.get("cells") or [{}]:
            lines.append(f"| {row['arm']} | {row['fused_launches']} | "
                         f"{step_columns(cell, base)} | {same} |")
    lines += ["", control_verdict(CONTROL, result["control_flagged"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_step_args(argv, __doc__.split("\n\n")[0], ARMS, CONTROL)
    arms, gpu, model = args.arms, args.gpu, args.model
    prototype = sibling("fused_norm_gemm_sweep")
    profile = sibling("profile_decode")
    t0 = time.time()
    ckpt = load_model(model, device=args.device)
    prompt = profile._prompt(40 if not gpu else 200, ckpt.config.vocab_size)
    result = {"kind": "fused-decode-sweep", "model": model,
              "device": torch.cuda.get_device_name() if gpu else "cpu (Triton interpreter)",
              "torch": torch.__version__, "arms": []}
    reference = None
    with (contextlib.nullcontext() if gpu else sm90_tables()):
        for arm in arms:
            engine, gen, fused = run_arm(ckpt, arm, prototype, device=args.device,
                                         cuda_graph=gpu, prompt=prompt)
            reference = reference or gen
            # A fused arm that never fused compares the shipped ops with themselves.
            row = {"arm": arm, "fused_launches": fused,
                   "ran_fused": fused > 0 or arm == "shipped", "equal": gen == reference,
                   "cells": []}
            if gpu and arm != CONTROL:
                row["cells"] = [profile.decode_cell(engine, prefix, ckpt.config.vocab_size,
                                                    args.tokens) for prefix in args.prefix]
            print(f"{arm}: {'same bits' if row['equal'] else 'DIFFERENT bits'}, "
                  f"{fused} fused launches"
                  + profile.replay_summary(row["cells"]) + f" [{time.time() - t0:.0f}s]",
                  flush=True)
            result["arms"].append(row)
            del engine
            profile.free_engine_memory()
    result["control_flagged"] = not next(r for r in result["arms"] if r["arm"] == CONTROL)["equal"]
    result["candidates_equal"] = all(r["equal"] and r["ran_fused"] for r in result["arms"]
                                     if r["arm"] != CONTROL)
    return finish(args.out_dir, "fused_decode", result, _markdown(result),
                  candidates="a fused arm")


if __name__ == "__main__":
    raise SystemExit(main())
