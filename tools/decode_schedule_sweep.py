"""Which new reduction schedules shorten the batch-1 decode step (issue 15, H200)?

The launch-level levers that keep the shipped bits are measured out (prefetch, pipelines,
packing, fusion: docs/decode-step-kernels.md). What is left changes a schedule, which the
invariance rule allows as long as the schedule is a function of the shape alone, never of
M: the kernel sweeps price two such changes one op at a time (a split of K for GEMMs whose
decode grid leaves SMs idle, `tools/promotion_interval_sweep.py`; a shorter attention
SEGMENT, `tools/attention_decode_sweep.py`). This prices them where it counts, in the CUDA
Graph decode step of the embedded engine:

- shipped:                the sm90 table and attention as shipped
- split-o:                split-K 2 for every GEMM whose M = 1 grid fills at most half the
                          SMs (Qwen3-8B: the o projection, 64 programs on 132 SMs)
- split-few:              split-K 2 for every GEMM whose M = 1 grid does not fill the SMs
                          (also q/k/v, 96 programs)
- segment-128/64:         every attention kernel at that SEGMENT
- split-few+segment-128:  both
- fold-attention:         the decode attention's combine done by each row's last segment
                          program (one launch instead of two; the shipped bits)
- fold-attention+split-few: both
- control-decode-block-kv-32: the decode attention (split kernel) in 32-key tiles, the
                          prefill in 64: an order that follows the call's shape, which the
                          check must flag

The bits change by design, so the check is the contract itself, per arm: a greedy
generation's decode logprobs (one CUDA Graph step per token after the prompt's prefill) equal
bit for bit the logprobs a cold prefill of prompt + generated tokens gives those tokens, and
the ids match. Per arm and prefix, on a GPU: the host-timed step and the graph replay
(`tools/profile_decode.py`'s decode_cell), the ratio to shipped, and a cold prefill of the
prefix (a schedule moves it too). On a CPU (`--device
cpu`, the interpreter, `synthetic:tiny-wide`, the SM90 tables) it runs the contract check
only: the unit test runs that. There the split rule finds nothing to split (K below two
BLOCK_K 256 tiles) and a 64-key segment needs a longer prompt than the interpreter runs in a
test; an arm that changed nothing is reported as not applied, never as kept.

Developer tool: writes decode_schedule.json and decode_schedule.md into OUT_DIR (and
decode_schedule.partial.json after every arm, what a run cut off leaves).
    python tools/decode_schedule_sweep.py OUT_DIR [--model synthetic:qwen3-8b?seed=0]
        [--prefix 128,2048] [--tokens 32] [--arms shipped,split-o,...] [--device cuda|cpu]
A winner is a table change (sm90.json) or ATTENTION_TILE's SEGMENT: result dependencies, so it
lands with an H200 evidence run and a re-recorded GSM8K fixture.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import NamedTuple

from det_suite.bench.sweep_cli import (control_verdict, cpu_requested, finish, load_tool,
                                       parse_step_args, step_columns)

if __name__ == "__main__" and cpu_requested(sys.argv[1:]):
    # The interpreter must be chosen before Triton is imported (platform/interpreter.py).
    from det_suite.platform.interpreter import use_interpreter
    use_interpreter()

import torch  # noqa: E402 - after the interpreter switch

from det_suite.backends.interface import Request  # noqa: E402
from det_suite.engine import Engine  # noqa: E402
from det_suite.models.spec import load_model  # noqa: E402
from det_suite.ops import batch_invariant  # noqa: E402
from det_suite.ops import linear as linear_ops  # noqa: E402
from det_suite.policy import shipped_policy  # noqa: E402
from det_suite.policy.table_format import entry_json, parse_entry  # noqa: E402
from det_suite.policy.tiles import TilePolicy  # noqa: E402
from det_suite.reports.files import write_json_atomic  # noqa: E402

class Schedule(NamedTuple):
    """What an arm changes; None: as shipped."""

    split_rule: str | None = None        # split-K 2 for M = 1 grids of at most: "half" the
                                         # SMs, or "few" (fewer than all of them)
    segment: int | None = None           # attention SEGMENT, every attention kernel
    decode_block_kv: int | None = None   # the decode attention's BLOCK_KV only
    fold_attention: bool = False         # the combine in the split kernel's last program
                                         # (tools/attention_fold_kernel.py, with PDL where
                                         # the ops use it)


CONTROL = "control-decode-block-kv-32"
ARM_SCHEDULES = {
    "shipped": Schedule(),
    "split-o": Schedule(split_rule="half"),
    "split-few": Schedule(split_rule="few"),
    "segment-128": Schedule(segment=128),
    "segment-64": Schedule(segment=64),
    "split-few+segment-128": Schedule(split_rule="few", segment=128),
    "fold-attention": Schedule(fold_attention=True),
    "fold-attention+split-few": Schedule(split_rule="few", fold_attention=True),
    CONTROL: Schedule(decode_block_kv=32),
}
ARMS = tuple(ARM_SCHEDULES)
CPU_SM_COUNT = 132        # the H200's: the rule then sees what it would see there
CHECK_TOKENS = 16
CPU_CHECK_TOKENS = 3
# The contract check's prompt: on the CPU past one 32-key tile, so the control cuts it, and
# short, as every prefill row runs through the interpreter.
CHECK_PROMPT = {"cuda": 200, "cpu": 36}


def sibling(name: str):
    """tools/<name>.py as a module: the step timing (profile_decode) and the attention
    segment patch (attention_decode_sweep)."""
    return load_tool(Path(__file__).with_name(f"{name}.py"))


def max_programs(rule: str | None, sm_count: int) -> int:
    """The largest M = 1 grid (programs) a rule splits."""
    return {None: 0, "half": sm_count // 2, "few": sm_count - 1}[rule]


@functools.lru_cache(maxsize=None)
def split_entry(entry, n: int, k: int, programs: int):
    """`entry` for (N, K) with split-K 2 (swapped decode tiles through the workspace, the
    others summing both chunks in one program), validated as a table entry is, where its
    M = 1 tile runs at most `programs` programs and it does not split already; else None."""
    if entry.split_k != 1 or -(-k // entry.block_k) < 2:
        return None
    decode = entry.select(1)
    if -(-n // decode.block_n) > programs:
        return None
    split = dataclasses.replace(entry, n=n, k=k, split_k=2, m_tiles=tuple(
        dataclasses.replace(t, use_workspace=t.swap_ab) for t in entry.m_tiles))
    return dataclasses.replace(parse_entry(entry_json(split), f"split of {n}x{k}", n, k),
                               promote_k=entry.promote_k)


@dataclasses.dataclass(frozen=True)
class ScheduleArmPolicy(TilePolicy):
    """A table whose entries split K where `programs` says (`split_entry`)."""

    programs: int = 0
    # The (N, K) shapes it split, as the engine asked for them: what the report names.
    split_shapes: set = dataclasses.field(default_factory=set, compare=False, hash=False)
    # The folded attention launches made (arms with fold_attention).
    fold_launches: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    def entry(self, n: int, k: int):
        base = super().entry(n, k)
        split = split_entry(base, n, k, self.programs)
        if split is None:
            return base
        self.split_shapes.add(f"{n}x{k}")
        return split


def arm_policy(arm: str, sm_count: int) -> ScheduleArmPolicy:
    base = shipped_policy("sm90").on_device(sm_count)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    return ScheduleArmPolicy(**fields,
                             programs=max_programs(ARM_SCHEDULES[arm].split_rule, sm_count))


@contextlib.contextmanager
def arm_schedule(arm: str, sm_count: int, attention):
    """The engine's GEMMs on the arm's table and its attention at the arm's tiles while
    inside (an engine captures its graphs at build time: build and run it inside)."""
    schedule = ARM_SCHEDULES[arm]
    policy = arm_policy(arm, sm_count)
    real, real_launch = linear_ops._device_policy, batch_invariant._launch
    linear_ops._device_policy = lambda _type, _index: policy
    if schedule.fold_attention:
        fold = attention.fold_launcher(pdl=True, launches=policy.fold_launches)

        def launch(call, tensors, launcher):
            folded = call.kernel in (attention.SPLIT_KERNEL, attention.COMBINE_KERNEL)
            return real_launch(call, tensors, fold if folded else launcher)
        batch_invariant._launch = launch
    decode_tiles = (attention.attention_tiles(("ATTENTION_SPLIT_TILE",),
                                              BLOCK_KV=schedule.decode_block_kv)
                    if schedule.decode_block_kv else contextlib.nullcontext())
    try:
        with attention.segment_tiles(schedule.segment), decode_tiles:
            yield policy
    finally:
        linear_ops._device_policy, batch_invariant._launch = real, real_launch


def applied(arm: str, policy: ScheduleArmPolicy, context: int) -> bool:
    """Whether the arm changed anything the check ran: a split where some GEMM was split, a
    folded attention where it launched, a segment or decode tile where the context is longer
    than it."""
    schedule = ARM_SCHEDULES[arm]
    return ((schedule.split_rule is None or bool(policy.split_shapes))
            and (not schedule.fold_attention or bool(policy.fold_launches))
            and (schedule.segment is None or context > schedule.segment)
            and (schedule.decode_block_kv is None or context > schedule.decode_block_kv))


def contract_check(engine: Engine, prompt, tokens: int) -> dict:
    """A greedy generation's decode logprobs against a cold prefill of prompt + its tokens:
    whether ids and logprobs are equal bit for bit, and how many logprobs differ."""
    engine.flush_cache()
    (decoded,) = engine.generate([Request(prompt_ids=prompt, max_new_tokens=tokens,
                                          logprobs_from=len(prompt))])
    engine.flush_cache()
    full = tuple(prompt) + tuple(decoded.output_ids[:-1])
    (prefilled,) = engine.generate([Request(prompt_ids=full, max_new_tokens=1,
                                            logprobs_from=len(prompt))])
    engine.flush_cache()
    ids_equal = tuple(decoded.output_ids) == full[len(prompt):] + tuple(prefilled.output_ids)
    a = torch.tensor(decoded.logprobs, dtype=torch.float64)
    b = torch.tensor(prefilled.logprobs, dtype=torch.float64)
    same_shape = a.shape == b.shape
    differing = int((a != b).sum()) if same_shape else max(len(a), len(b))
    return {"equal": ids_equal and same_shape and differing == 0, "ids_equal": ids_equal,
            "compared": len(a), "differing_logprobs": differing}


def prefill_ms(profile, engine: Engine, prompt, repeats: int = 3) -> float:
    """A cold prefill of `prompt` (profile_decode's generate_ms of one new token), median of
    `repeats` after a warm-up: a segment or a split moves the prefill too, which `bench e2e`'s
    end-to-end gate counts."""
    profile.generate_ms(engine, prompt, 1)
    return sorted(profile.generate_ms(engine, prompt, 1) for _ in range(repeats))[repeats // 2]


def _markdown(result: dict) -> str:
    lines = [f"# Decode schedules in the step ({result['device']}, {result['model']})", "",
             "Batch-1 CUDA Graph decode, det mode; ratio: arm / shipped replay. Contract: the "
             "decode logprobs equal a cold prefill's of the same tokens, bit for bit.", "",
             "| arm | contract | prefix | replay ms | step ms | replay ratio | prefill ms |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    base = {c["prefix"]: c for c in result["arms"][0].get("cells", [])}
    for row in result["arms"]:
        check = row["check"]
        verdict = (f"kept ({check['compared']} logprobs)" if check["equal"] else
                   f"BROKEN ({check['differing_logprobs']} of {check['compared']} differ"
                   f"{'' if check['ids_equal'] else ', ids differ'})")
        if not row["applied"]:
            verdict = "not applied (nothing changed)"
        elif row["split_shapes"]:
            verdict += f"; split {', '.join(row['split_shapes'])}"
        for cell in row.get("cells") or [{}]:
            prefill = f"{cell['prefill_ms']:.2f}" if "prefill_ms" in cell else "-"
            lines.append(f"| {row['arm']} | {verdict} | {step_columns(cell, base)} | "
                         f"{prefill} |")
    lines += ["", control_verdict(CONTROL, result["control_flagged"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_step_args(argv, __doc__.split("\n\n")[0], ARMS, CONTROL)
    arms, gpu, model = args.arms, args.gpu, args.model
    profile, attention = sibling("profile_decode"), sibling("attention_decode_sweep")
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count if gpu else CPU_SM_COUNT
    t0 = time.time()
    ckpt = load_model(model, device=args.device)
    vocab = ckpt.config.vocab_size
    prompt = profile._prompt(CHECK_PROMPT[args.device], vocab)
    result = {"kind": "decode-schedule-sweep", "model": model, "sm_count": sm_count,
              "device": torch.cuda.get_device_name() if gpu else "cpu (Triton interpreter)",
              "torch": torch.__version__, "arms": []}
    for arm in arms:
        with arm_schedule(arm, sm_count, attention) as policy:
            engine = Engine(ckpt, mode="det", cuda_graph=gpu, graph_batch_sizes=(1,),
                            max_seq_len=4096 if gpu else 96, device=args.device)
            row = {"arm": arm, "schedule": ARM_SCHEDULES[arm]._asdict(),
                   "check": contract_check(engine, prompt,
                                           CHECK_TOKENS if gpu else CPU_CHECK_TOKENS),
                   "cells": []}
            row["split_shapes"] = sorted(policy.split_shapes)
            row["fold_launches"] = len(policy.fold_launches)
            row["applied"] = applied(arm, policy, len(prompt))
            if gpu and arm != CONTROL:
                row["cells"] = [
                    {**profile.decode_cell(engine, prefix, vocab, args.tokens),
                     "prefill_ms": prefill_ms(profile, engine, profile._prompt(prefix, vocab))}
                    for prefix in args.prefix]
        check = row["check"]
        print(f"{arm}: {'' if row['applied'] else 'NOT APPLIED, '}"
              f"contract {'kept' if check['equal'] else 'BROKEN'} "
              f"({check['compared']} logprobs, {check['differing_logprobs']} differ)"
              + (f"; split {', '.join(row['split_shapes'])}" if row["split_shapes"] else "")
              + profile.replay_summary(row["cells"]) + f" [{time.time() - t0:.0f}s]", flush=True)
        result["arms"].append(row)
        # After every arm: a run cut off (a device call's limit) keeps the arms it finished;
        # the verdict files are written at the end.
        write_json_atomic(args.out_dir / "decode_schedule.partial.json", result)
        del engine
        profile.free_engine_memory()
    control = next(r for r in result["arms"] if r["arm"] == CONTROL)
    result["control_flagged"] = control["applied"] and not control["check"]["equal"]
    # An arm that changed nothing kept the contract vacuously: reported, not counted.
    result["candidates_equal"] = all(r["check"]["equal"] for r in result["arms"]
                                     if r["arm"] != CONTROL and r["applied"])
    return finish(args.out_dir, "decode_schedule", result, _markdown(result),
                  candidates="an arm (its decode broke the prefill contract)")


if __name__ == "__main__":
    raise SystemExit(main())
