"""PTX -> MMA instruction records, on hand-written snippets shaped like Triton 3.6's output."""

import pytest

from det_suite.lint.ptx_instructions import (
    decode_tcgen05_descriptor,
    parse_mma_instructions,
    summarize,
)

MMA_SYNC_E4M3 = ("\tmma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 { %r489, %r490, %r491, "
                 "%r492 }, { %r311, %r312, %r313, %r314 }, { %r309, %r310 }, "
                 "{ %r489, %r490, %r491, %r492 };\n")
MMA_SYNC_F16 = ("\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 { %r441, %r442, %r443, "
                "%r444 }, { %r341, %r342, %r343, %r344 }, { %r309, %r311 }, "
                "{ %r441, %r442, %r443, %r444 };\n")
WGMMA_E4M3 = """\
\t// begin inline asm
\twgmma.fence.sync.aligned;
\t// end inline asm
\t// begin inline asm
\twgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%r550,%r551}, %rd266, %rd267, %p2, 1, 1;
\t// end inline asm
\twgmma.commit_group.sync.aligned;
\twgmma.wait_group.sync.aligned 0;
"""
TCGEN05 = """\
\t@%p1 tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r85], 64;
\tmov.b32 \t%r383, 135299088;
\tmov.pred \t%p6, 0;
\t// begin inline asm
\t@%p7 tcgen05.mma.cta_group::1.kind::f8f6f4 [ %r467 + 0 ], %rd328, %rd329, %r383, %p6;
\t// end inline asm
\t@%p7 tcgen05.mma.cta_group::1.kind::f8f6f4 [ %r467 + 0 ], %rd330, %rd331, %r383, %p8;
\t@%p7 tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%rd336];
\ttcgen05.ld.sync.aligned.32x32b.x64.b32 {%r402, %r403}, [%r466 + 0];
"""
TCGEN05_UNRESOLVED = ("\t@%p7 tcgen05.mma.cta_group::1.kind::f8f6f4 [ %r467 + 0 ], %rd328, "
                      "%rd329, %r383, %p6;\n")


@pytest.mark.parametrize("ptx, family, shape, k_step, operand, summary", [
    (MMA_SYNC_E4M3, "mma.sync", "m16n8k32", 32, "e4m3", "mma.sync m16n8k32 e4m3"),
    (MMA_SYNC_F16, "mma.sync", "m16n8k16", 16, "f16", "mma.sync m16n8k16 f16"),
    (WGMMA_E4M3, "wgmma", "m64n64k32", 32, "e4m3", "wgmma m64n64k32 e4m3"),
    (TCGEN05, "tcgen05", "m128n64k32", 32, "e4m3", "tcgen05.mma kind::f8f6f4 m128n64k32 e4m3"),
    (TCGEN05_UNRESOLVED, "tcgen05", None, 32, "f8f6f4", "tcgen05.mma kind::f8f6f4 k32"),
], ids=["mma-sync-e4m3-sm89", "mma-sync-f16-converted-sm90", "wgmma-e4m3-sm90",
        "tcgen05-descriptor-decoded", "tcgen05-descriptor-unresolved"])
def test_parses_one_instruction(ptx, family, shape, k_step, operand, summary):
    (instruction,) = parse_mma_instructions(ptx)
    assert (instruction.family, instruction.shape, instruction.k_step,
            instruction.operand_type, instruction.summary()) == \
        (family, shape, k_step, operand, summary)


def test_full_opcode_is_kept():
    (instruction,) = parse_mma_instructions(WGMMA_E4M3)
    assert instruction.opcode == "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"


def test_repeated_statements_are_counted_once():
    (instruction,) = parse_mma_instructions(MMA_SYNC_E4M3 * 8)
    assert instruction.count == 8


def test_distinct_instructions_keep_first_appearance_order():
    found = parse_mma_instructions(MMA_SYNC_F16 + WGMMA_E4M3 + MMA_SYNC_F16)
    assert [i.family for i in found] == ["mma.sync", "wgmma"]


@pytest.mark.parametrize("ptx", [
    "\t// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 in a comment;\n",
    "/* wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 */\n",
    '.file 1 "/src/mma.sync.aligned.m16n8k16.py"\n',
    "\tmov.u32 %r1, %tid.x;\n\tld.shared.b32 %r2, [%r3];\n",
    "\twgmma.fence.sync.aligned;\n\ttcgen05.commit.cta_group::1.b64 [%rd1];\n",
    "\t@%p10 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
    "[%r32], [%rd10, {%r31, %r74}], [%r22];\n"
    "\tmbarrier.try_wait.parity.shared.b64 complete, [%r22], %r9;\n",
    "\t@%p3 atom.global.gpu.acq_rel.add.u32 %r10, [ %rd4 + 0 ], %r11;\n"
    "\t@%p4 atom.global.gpu.relaxed.exch.b32 %r12, [ %rd4 + 0 ], %r13;\n",
], ids=["line-comment", "block-comment", "string", "plain-code", "mma-housekeeping",
        "tma-loads", "split-k-counter"])
def test_no_mma_found(ptx):
    assert parse_mma_instructions(ptx) == []


def test_summary_of_no_instructions():
    assert summarize([]) == "no MMA"


@pytest.mark.parametrize("ptx, expected", [
    ("\t@%p3 mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%r1}, {%r2}, {%r3}, {%r1};\n",
     "mma.sync m16n8k32 e4m3"),
    ("\t{ .reg .pred p; setp.ne.b32 p, %r1, 0; "
     "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%r1}, {%r2}, {%r3}, {%r1}; }\n",
     "mma.sync m16n8k16 bf16"),
    ("\tmma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e4m3.e4m3.f32 "
     "{%r1}, {%r2}, {%r3}, {%r1}, %r9, 0x0;\n", "mma.sync.sp m16n8k64 e4m3"),
    ("\twgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%r1}, %rd1, %rd2, 1, 1, 1, 1, 1;\n",
     "wgmma m64n128k16 bf16"),
    ("\twgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2 {%r1}, %rd1, %rd2, 1, 1;\n",
     "wgmma m64n64k32 e4m3xe5m2"),
    ("\ttcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, 0x8100490, %p1;\n",
     "tcgen05.mma kind::f16 m128n64k16 bf16"),
], ids=["predicated", "inline-asm-block", "sparse-mma", "wgmma-bf16", "wgmma-mixed-fp8",
        "tcgen05-immediate-descriptor"])
def test_instruction_variants(ptx, expected):
    assert summarize(parse_mma_instructions(ptx)) == expected


def test_descriptor_assigned_twice_is_not_guessed():
    ptx = "\tmov.b32 %r383, 135299088;\n\tmov.b32 %r383, 1;\n" + TCGEN05_UNRESOLVED
    (instruction,) = parse_mma_instructions(ptx)
    assert instruction.descriptor is None


def test_tcgen05_descriptor_fields():
    # Triton 3.6, sm_100, BLOCK_M 128 x BLOCK_N 64 FP8 tile: f32 accumulator, e4m3 operands.
    assert decode_tcgen05_descriptor("f8f6f4", 135299088) == dict(
        acc_type="f32", a_type="e4m3", b_type="e4m3", n=64, m=128)


@pytest.mark.parametrize("first, second, same", [
    (WGMMA_E4M3, WGMMA_E4M3.replace("m64n64k32", "m64n128k32"), True),
    (MMA_SYNC_E4M3, MMA_SYNC_F16, False),
    (MMA_SYNC_F16, WGMMA_E4M3, False),
], ids=["wgmma-n64-vs-n128-same", "k32-e4m3-vs-k16-f16-differ", "mma-sync-vs-wgmma-differ"])
def test_signature_compares_family_k_and_operand(first, second, same):
    (a,) = parse_mma_instructions(first)
    (b,) = parse_mma_instructions(second)
    assert (a.signature == b.signature) is same


def test_record_serialises_with_derived_fields():
    (instruction,) = parse_mma_instructions(MMA_SYNC_F16)
    data = instruction.to_dict()
    assert (data["signature"], data["summary"], data["operand_type"]) == \
        (["mma.sync", 16, "f16"], "mma.sync m16n8k16 f16", "f16")
