"""What the lint reports: one `VariantResult` per PTX listing, grouped by table entry
(`EntryResult`) and (table, target) pair (`TableResult`), the fixed kernels, and the whole
run (`LintResult`, whose `to_dict()` is the `det-suite/policy-lint/2` JSON schema)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from det_suite.lint.render import render_markdown, render_text
from det_suite.lint.variants import LAUNCH_SELECTED

SCHEMA = "det-suite/policy-lint/2"


@dataclass
class VariantResult:
    kernel: str
    tile: int                 # index of the entry's m_tile
    m_range: str              # rows that select this tile
    m: int                    # M the variant was specialised for (1: decode constant)
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    stages_source: str        # "table" or "override"
    split_k: int
    group_m: int
    write_partials: bool
    even_k: bool
    k: int                    # K the variant was specialised for
    tma: bool                 # TMA descriptor loads (fp8_scaled_mm_tma_kernel)
    fixup: str                # split-K partials summed: "fused" | "reduce" | "" (no workspace)
    launch: str               # selected | pointer fallback | single-pass check
    expects_mma: bool         # False: a kernel that must hold no MMA (the split-K reduce)
    status: str               # ok | no-mma | error | unsupported | unexpected-mma
    summary: str              # instruction summary or the error's last line
    instructions: list[dict] = field(default_factory=list)
    error: str | None = None
    ptx_sha256: str | None = None
    pdl: bool = False         # launched with programmatic dependent launch
    pdl_order: str = ""       # where a PDL variant waits for the previous grid (PTX)
    prefetch_k: int = 0       # K elements of weight rows fetched into L2 before the wait
    swap_ab: bool = False     # TMA kernel with the weight on the MMA's row side (SWAP_AB)
    label: str = ""

    def __post_init__(self):
        self.label = self.describe()

    def describe(self) -> str:
        parts = [f"BLOCK_M {self.block_m}", f"w{self.num_warps}", f"s{self.num_stages}",
                 "EVEN_K" if self.even_k else "K-tail"]
        if self.k % 16:
            parts.append(f"K%16={self.k % 16}")
        if self.tma:
            parts.append("TMA")
        if self.write_partials:
            parts.append(f"partials+{self.fixup}")
        if self.pdl:
            parts.append("PDL")
        if self.prefetch_k:
            parts.append(f"L2 prefetch {self.prefetch_k}")
        if self.launch != LAUNCH_SELECTED:
            parts.append(f"({self.launch})")
        if self.m == 1:
            parts.append("M=1")
        if not self.expects_mma:
            parts.insert(0, f"{self.kernel} after")
        return " ".join(parts)

    def signatures(self) -> set[tuple]:
        return {tuple(i["signature"]) for i in self.instructions}


@dataclass
class EntryResult:
    key: str
    status: str               # ok | violation | unsupported
    instruction: str          # the one instruction, or a description of the mix
    message: str | None
    variants: list[VariantResult]


@dataclass
class TableResult:
    family: str
    source: str
    capability: int
    arch: str
    role: str
    expected_mma: str
    expected_match: bool | None
    entries: list[EntryResult]


@dataclass
class FixedKernelResult:
    kernel: str
    capability: int
    arch: str
    status: str               # ok | violation | unsupported | error
    summary: str
    error: str | None = None


@dataclass
class LintResult:
    triton_version: str
    override_stages: list[int]
    tables: list[TableResult]
    fixed_kernels: list[FixedKernelResult]
    violations: list[str]
    warnings: list[str]
    compiled: int = 0
    cache_hits: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict:
        data = asdict(self)
        data["ok"] = self.ok
        data["schema"] = SCHEMA
        return data

    def to_markdown(self) -> str:
        return render_markdown(self.to_dict())

    def to_text(self, verbose: bool = False) -> str:
        return render_text(self.to_dict(), verbose=verbose)
