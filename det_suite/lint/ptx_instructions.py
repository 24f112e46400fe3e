"""The matrix-multiply-accumulate (tensor core) instructions in a PTX listing.

Pure text processing (no Triton, no torch), so it is unit-testable on strings. It finds
every MMA statement of the families NVIDIA GPUs have had:

- ``mma.sync`` (also sparse ``mma.sp``), warp-level, sm_80+; e.g.
  ``mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32``.
- ``wgmma.mma_async``, warpgroup-level, sm_90a only; e.g.
  ``wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3``.
- ``tcgen05.mma``, sm_100-class; e.g. ``tcgen05.mma.cta_group::1.kind::f8f6f4``. Its
  operand formats and M/N live in a 32-bit instruction descriptor operand, not the opcode;
  when that operand is an immediate or a register set once by ``mov`` in the listing, the
  descriptor is decoded (bit layout of the PTX ISA's tcgen05 "Instruction descriptor").
- ``wmma.mma`` (legacy WMMA) is recognised too, so no tensor-core statement is missed.

For invariance what matters along K is the *signature*: (family, K step, operand type).
Two tiles with the same signature issue the same instruction on the same operand format,
so the order and rounding of the K reduction cannot differ between them; two tiles with
different signatures (e.g. ``mma.sync m16n8k16 f16`` on FP8 values converted to FP16 vs
``wgmma m64n64k32 e4m3``) sum and round differently.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

# PTX type suffixes that name an operand or accumulator format.
_TYPES = frozenset({
    "f16", "f16x2", "bf16", "bf16x2", "tf32", "f32", "f64",
    "e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "ue8m0", "ue4m3",
    "s8", "u8", "s4", "u4", "b1", "s32",
})

_SHAPE_RE = re.compile(r"^m(\d+)n(\d+)k(\d+)$")
_OPCODE_RE = re.compile(
    r"(?<![\w.%$])(?P<op>(?:wgmma\.mma_async|tcgen05\.mma|wmma\.mma|mma)(?:\.[\w:]+)+)")
_LINE_COMMENT_RE = re.compile(r"//[^\n]*")
_BLOCK_COMMENT_RE = re.compile(r"/\*.*?\*/", re.S)
_STRING_RE = re.compile(r'"[^"\n]*"')
_MOV_IMM_RE = re.compile(r"\bmov\.(?:b32|u32|s32)\s+(%\w+)\s*,\s*(-?(?:0[xX][0-9a-fA-F]+|\d+))\s*$")

# K elements per tcgen05.mma by kind (dense; the sparse form doubles it), PTX ISA.
_TCGEN05_K = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32, "mxf8f6f4": 32, "mxf4": 64,
              "mxf4nvf4": 64}
# Operand format codes of the tcgen05 instruction descriptor, by kind.
_TCGEN05_FORMATS = {
    "f16": {0: "f16", 1: "bf16"},
    "tf32": {2: "tf32"},
    "f8f6f4": {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"},
    "mxf8f6f4": {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"},
    "i8": {0: "u8", 1: "s8"},
}
_TCGEN05_ACC = {0: "f16", 1: "f32", 2: "s32"}


@dataclass(frozen=True)
class MmaInstruction:
    """One distinct MMA opcode found in a PTX listing."""

    family: str              # "mma.sync" | "wgmma" | "tcgen05" | "wmma"
    opcode: str              # as in the PTX: "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"
    m: int | None
    n: int | None
    k_step: int | None       # K elements one instruction consumes
    a_type: str | None       # operand formats as the instruction reads them
    b_type: str | None
    acc_type: str | None
    kind: str | None = None  # "f8f6f4" etc. (tcgen05, and mma.sync's kind:: qualifier)
    sparse: bool = False
    count: int = 1           # statements with this opcode in the listing
    descriptor: int | None = None  # tcgen05 instruction descriptor, when resolved

    @property
    def operand_type(self) -> str | None:
        """The input format of the multiply ('e4m3'; 'f16' when FP8 was converted)."""
        if self.a_type is None and self.b_type is None:
            return self.kind
        if self.a_type == self.b_type:
            return self.a_type
        return f"{self.a_type}x{self.b_type}"

    @property
    def shape(self) -> str | None:
        if self.m is None or self.n is None or self.k_step is None:
            return None
        return f"m{self.m}n{self.n}k{self.k_step}"

    @property
    def signature(self) -> tuple[str, int | None, str | None]:
        """What must agree along K for two tiles to reduce identically."""
        return (self.family, self.k_step, self.operand_type)

    def summary(self) -> str:
        """Short human form: 'mma.sync m16n8k16 f16', 'wgmma m64n64k32 e4m3',
        'tcgen05.mma kind::f8f6f4 m128n64k32 e4m3'."""
        parts = ["tcgen05.mma" if self.family == "tcgen05" else self.family]
        if self.sparse:
            parts[0] += ".sp"
        if self.kind:
            parts.append(f"kind::{self.kind}")
        shape = self.shape
        if shape is None and self.k_step is not None:
            shape = f"k{self.k_step}"
        if shape:
            parts.append(shape)
        operand = self.operand_type
        if operand and operand != self.kind:
            parts.append(operand)
        return " ".join(parts)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(operand_type=self.operand_type, shape=self.shape, summary=self.summary(),
                    signature=list(self.signature))
        return data


def _clean(ptx: str) -> str:
    ptx = _BLOCK_COMMENT_RE.sub(" ", ptx)
    ptx = _LINE_COMMENT_RE.sub("", ptx)
    return _STRING_RE.sub('""', ptx)


def _split_operands(text: str) -> list[str]:
    """Top-level comma split: '[ %r1 + 0 ], %rd2, {%r3, %r4}' -> 3 operands."""
    operands, depth, current = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            operands.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    tail = "".join(current).strip()
    if tail:
        operands.append(tail)
    return operands


def _shape_and_types(tokens: list[str]) -> tuple[tuple[int, int, int] | None, list[str]]:
    shape = None
    types = []
    for token in tokens:
        match = _SHAPE_RE.match(token)
        if match:
            shape = tuple(int(g) for g in match.groups())
        elif token in _TYPES:
            types.append(token)
    return shape, types


def _kind_of(tokens: list[str]) -> str | None:
    for token in tokens:
        if token.startswith("kind::"):
            return token[len("kind::"):]
    return None


def _parse_mma_sync(opcode: str) -> dict:
    # mma[.sp[::ordered_metadata]].sync.aligned.mMnNkK.alayout.blayout[.kind::K][.satfinite].d.a.b.c
    tokens = opcode.split(".")[1:]
    shape, types = _shape_and_types(tokens)
    d, a, b = (types + [None, None, None])[:3]
    return dict(family="mma.sync", m=shape[0] if shape else None, n=shape[1] if shape else None,
                k_step=shape[2] if shape else None, a_type=a, b_type=b, acc_type=d,
                kind=_kind_of(tokens), sparse=tokens[0].startswith("sp"))


def _parse_wgmma(opcode: str) -> dict:
    # wgmma.mma_async[.sp].sync.aligned.m64nNkK[.satfinite].d.a.b
    tokens = opcode.split(".")[2:]
    shape, types = _shape_and_types(tokens)
    d, a, b = (types + [None, None, None])[:3]
    return dict(family="wgmma", m=shape[0] if shape else None, n=shape[1] if shape else None,
                k_step=shape[2] if shape else None, a_type=a, b_type=b, acc_type=d,
                kind=None, sparse="sp" in tokens)


def _parse_wmma(opcode: str) -> dict:
    # wmma.mma.sync.aligned.alayout.blayout.shape.dtype[.atype.btype].ctype
    tokens = opcode.split(".")[2:]
    shape, types = _shape_and_types(tokens)
    if len(types) >= 4:
        d, a, b = types[0], types[1], types[2]
    else:  # f16/f32 forms name only d and c: the operands are f16
        d, a, b = (types[0] if types else None), "f16", "f16"
    return dict(family="wmma", m=shape[0] if shape else None, n=shape[1] if shape else None,
                k_step=shape[2] if shape else None, a_type=a, b_type=b, acc_type=d,
                kind=None, sparse=False)


def decode_tcgen05_descriptor(kind: str, value: int) -> dict:
    """Fields of a tcgen05.mma instruction descriptor (kinds f16, tf32, f8f6f4, i8)."""
    value &= 0xFFFFFFFF
    formats = _TCGEN05_FORMATS.get(kind, {})
    a_code, b_code = (value >> 7) & 0x7, (value >> 10) & 0x7
    return dict(
        acc_type=_TCGEN05_ACC.get((value >> 4) & 0x3),
        a_type=formats.get(a_code, f"fmt{a_code}") if formats else None,
        b_type=formats.get(b_code, f"fmt{b_code}") if formats else None,
        n=((value >> 17) & 0x3F) << 3,
        m=((value >> 24) & 0x1F) << 4,
    )


def _parse_tcgen05(opcode: str, operands: list[str], movs: dict[str, set[int]]) -> dict:
    # tcgen05.mma[.sp][.ws].cta_group::N.kind::K [d], a, b, [sp-meta,] idesc, ...
    tokens = opcode.split(".")[2:]
    kind = _kind_of(tokens)
    sparse = "sp" in tokens
    k_step = _TCGEN05_K.get(kind) if kind else None
    if k_step is not None and sparse:
        k_step *= 2
    record = dict(family="tcgen05", m=None, n=None, k_step=k_step, a_type=None, b_type=None,
                  acc_type=None, kind=kind, sparse=sparse, descriptor=None)
    idesc_index = 4 if sparse else 3
    if kind in _TCGEN05_FORMATS and len(operands) > idesc_index:
        operand = operands[idesc_index]
        value = None
        if re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)", operand):
            value = int(operand, 0)
        elif len(movs.get(operand, ())) == 1:
            value = next(iter(movs[operand]))
        if value is not None:
            record.update(decode_tcgen05_descriptor(kind, value), descriptor=value & 0xFFFFFFFF)
    return record


def statements(ptx: str) -> list[str]:
    """The ';'-separated statements of a listing, comments and string literals removed."""
    return [s for s in _clean(ptx).split(";") if s.strip()]


def parse_mma_instructions(ptx: str) -> list[MmaInstruction]:
    """Distinct MMA instructions in `ptx`, in order of first appearance, with counts.

    Two statements are the same instruction when their opcode and (for tcgen05) their
    decoded descriptor agree.
    """
    listing = statements(ptx)
    movs: dict[str, set[int]] = {}
    for statement in listing:
        match = _MOV_IMM_RE.search(statement.strip())
        if match:
            movs.setdefault(match.group(1), set()).add(int(match.group(2), 0))
    found: dict[tuple, dict] = {}
    for statement in listing:
        for match in _OPCODE_RE.finditer(statement):
            opcode = match.group("op")
            operands = _split_operands(statement[match.end():])
            if opcode.startswith("wgmma.mma_async"):
                record = _parse_wgmma(opcode)
            elif opcode.startswith("tcgen05.mma"):
                record = _parse_tcgen05(opcode, operands, movs)
            elif opcode.startswith("wmma.mma"):
                record = _parse_wmma(opcode)
            elif ".sync" in opcode:
                record = _parse_mma_sync(opcode)
            else:
                continue  # e.g. an identifier that merely starts with "mma."
            key = (opcode, record.get("descriptor"))
            if key in found:
                found[key]["count"] += 1
            else:
                found[key] = dict(record, opcode=opcode, count=1)
    return [MmaInstruction(**record) for record in found.values()]


def summarize(instructions) -> str:
    """One line for a listing: distinct summaries joined by ' + ', or 'no MMA'."""
    if not instructions:
        return "no MMA"
    seen = []
    for instruction in instructions:
        text = instruction.summary()
        if text not in seen:
            seen.append(text)
    return " + ".join(seen)
