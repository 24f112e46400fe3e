"""What an A/B timing compares: named arms (one engine configuration each), the boot order,
and the settings of a run.

An arm is written `NAME=key=value,key=value` on the command line, e.g.
`det-s3=mode=det,graph=on,stages=3`. Keys: `mode` (det: det-suite's kernels; fast-stock:
the fastest non-batch-invariant path, the default control, `engine.fast_stock`; stock: the
older control, torch ops without fusions; m-dependent: the cache-hit positive control), `graph` (on/off: CUDA Graph decode), `stages` (the FP8 kernel's pipeline depth,
or `table` for the tile table's own), `backend` (embedded; sglang once it exists). Arms are
lettered A, B, C ... in the order given; the boot order names letters ("ABBA": A, then B
twice, then A, each a fresh process). Ratios are always arm / A.
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass, field
from typing import Callable

from det_suite.backends.open import BACKENDS
from det_suite.policy.tiles import SUPPORTED_STAGES

MODES = ("det", "fast-stock", "stock", "m-dependent")
# What each mode runs, named in the report so a reader knows what a ratio compares.
MODE_KERNELS = {
    "det": "det-suite's batch-invariant kernels: FP8 scaled-MM (q/k/v and gate/up stacked, "
           "segmented), paged attention with a fixed split, fused norm/silu-mul + FP8 "
           "quantize, q/k norm + RoPE + KV write, BF16 lm_head GEMM, log_softmax",
    "fast-stock": None,     # engine.fast_stock.KERNELS (imported lazily: it imports torch)
    "stock": "torch ops without fusions: quantize + torch._scaled_mm per linear, torch "
             "RMSNorm, SDPA over K/V gathered from the cache, F.linear lm_head, "
             "torch.log_softmax",
    "m-dependent": "det's kernels with FP8 linears whose K-chunk count follows M "
                   "(engine.m_dependent)",
}


def mode_kernels(mode: str) -> str:
    if mode == "fast-stock":
        from det_suite.engine.fast_stock import KERNELS
        return "; ".join(f"{op}: {what}" for op, what in KERNELS.items())
    return MODE_KERNELS[mode]
ON_OFF = {"on": True, "off": False, "1": True, "0": False, "true": True, "false": False}

PRESETS = {
    # The seed's matrix: prefix 128 / 2048 x batch 1 / 4, 32 forced output tokens, one
    # warm-up and five samples per cell per boot; plus prefix 8192, where decode attention
    # (split-KV in the control, a fixed split in det) weighs most (issue 39).
    "full": dict(prefixes=(128, 2048, 8192), batches=(1, 4), output_tokens=32, warmup=1, samples=5,
                 page_size=16),
    # CPU-sized (kernels on the Triton interpreter): the same protocol on a few tokens.
    "small": dict(prefixes=(8,), batches=(1, 2), output_tokens=3, warmup=1, samples=2,
                  page_size=4),
}
DEFAULT_ORDER = "ABBA"
DEFAULT_MAX_TEMP_C = 55.0
DEFAULT_GATE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Arm:
    name: str
    mode: str = "det"
    cuda_graph: bool = False
    stages: int | None = None        # None: the tile table's own pipeline depth
    backend: str = "embedded"

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError(f"arm name: expected letters, digits, '-', '_' or '.', got "
                             f"{self.name!r}")
        if self.mode not in MODES:
            raise ValueError(f"arm {self.name}: mode: expected one of {', '.join(MODES)}, got "
                             f"{self.mode!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"arm {self.name}: backend: expected one of "
                             f"{', '.join(BACKENDS)}, got {self.backend!r}")
        if self.stages is not None:
            if self.stages not in SUPPORTED_STAGES:
                raise ValueError(f"arm {self.name}: stages: expected one of "
                                 f"{SUPPORTED_STAGES} or 'table', got {self.stages!r}")
            if self.mode != "det":
                raise ValueError(f"arm {self.name}: stages: only det mode runs det-suite's "
                                 "kernel; the stock control has no pipeline depth to set")

    def describe(self) -> str:
        stages = f", {self.stages} stages" if self.stages else ""
        return (f"{self.mode} mode, {'CUDA Graph' if self.cuda_graph else 'eager'} decode"
                f"{stages}, {self.backend}")

    def as_dict(self) -> dict:
        return asdict(self)


def parse_arm(text: str) -> Arm:
    """'NAME=key=value,...' -> Arm; a bad spec raises ValueError naming what was expected."""
    name, sep, rest = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"arm {text!r}: expected NAME=key=value,... (keys: mode, graph, "
                         "stages, backend)")
    values: dict = {}
    for item in (p.strip() for p in rest.split(",") if p.strip()):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip().lower()
        if not eq:
            raise ValueError(f"arm {name}: {item!r}: expected key=value (an arm is "
                             "NAME=key=value,...)")
        if key == "mode":
            values["mode"] = value
        elif key == "graph":
            if value not in ON_OFF:
                raise ValueError(f"arm {name}: graph: expected on or off, got {value!r}")
            values["cuda_graph"] = ON_OFF[value]
        elif key == "stages":
            if value != "table" and not value.isdigit():
                raise ValueError(f"arm {name}: stages: expected an int or 'table', got "
                                 f"{value!r}")
            values["stages"] = None if value == "table" else int(value)
        elif key == "backend":
            values["backend"] = value
        else:
            raise ValueError(f"arm {name}: unknown key {key!r}; expected mode, graph, stages "
                             "or backend")
    return Arm(name=name.strip(), **values)


def default_arms(cuda: bool) -> tuple[Arm, Arm]:
    """A = the fast stock control (the best non-batch-invariant path, `engine.fast_stock`),
    B = det mode; CUDA Graph decode where there is CUDA. The older, unfused control stays
    reachable as `--arm control=mode=stock`."""
    return (Arm("stock", mode="fast-stock", cuda_graph=cuda),
            Arm("det", mode="det", cuda_graph=cuda))


def arm_letters(count: int) -> str:
    if count > len(string.ascii_uppercase):
        raise ValueError(f"arms: at most {len(string.ascii_uppercase)}, got {count}")
    return string.ascii_uppercase[:count]


def parse_order(order: str, arm_count: int) -> tuple[int, ...]:
    """'ABBA' (or 'A,B,B,A') -> arm indices; every arm must boot at least once."""
    letters = arm_letters(arm_count)
    cleaned = order.replace(",", "").replace(" ", "").upper()
    bad = sorted({c for c in cleaned if c not in letters})
    if not cleaned or bad:
        raise ValueError(f"order: expected letters from {letters} (one per boot, e.g. "
                         f"{DEFAULT_ORDER}), got {order!r}")
    missing = [letters[i] for i in range(arm_count) if letters[i] not in cleaned]
    if missing:
        raise ValueError(f"order: arm(s) {', '.join(missing)} never boot in {order!r}")
    return tuple(letters.index(c) for c in cleaned)


def _positive_ints(values, name: str) -> tuple[int, ...]:
    values = tuple(values)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                         for v in values):
        raise ValueError(f"{name}: expected positive ints, got {values!r}")
    return values


@dataclass(frozen=True)
class E2ESettings:
    out: str
    model: str = "synthetic:tiny?seed=0"
    arms: tuple[Arm, ...] = field(default_factory=lambda: default_arms(False))
    order: str = DEFAULT_ORDER
    prefixes: tuple[int, ...] = PRESETS["small"]["prefixes"]
    batches: tuple[int, ...] = PRESETS["small"]["batches"]
    output_tokens: int = PRESETS["small"]["output_tokens"]
    warmup: int = PRESETS["small"]["warmup"]
    samples: int = PRESETS["small"]["samples"]
    page_size: int = PRESETS["small"]["page_size"]
    seed: int = 0
    device: str | None = None            # default: cuda when available, else cpu
    max_temp_c: float | None = DEFAULT_MAX_TEMP_C   # None: no thermal gate
    gate_timeout_s: float = DEFAULT_GATE_TIMEOUT_S
    gate_poll_s: float = 1.0
    measure_floor: bool = True           # weight bytes / copy bandwidth (CUDA only)
    max_ratio: float | None = None       # gate: every cell's e2e arm/A ratio
    max_decode_floor_ratio: float | None = None   # gate: batch-1 graph decode step / floor
    resume: bool = False
    force: bool = False
    boot_timeout_s: float | None = None
    progress: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefixes", _positive_ints(self.prefixes, "prefixes"))
        object.__setattr__(self, "batches", _positive_ints(self.batches, "batches"))
        for name in ("output_tokens", "samples", "page_size"):
            _positive_ints((getattr(self, name),), name)
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup: expected an int >= 0, got {self.warmup!r}")
        if self.output_tokens < 2:
            raise ValueError(f"output_tokens: expected >= 2 (decode time per token needs at "
                             f"least one decode step), got {self.output_tokens}")
        if len(self.arms) < 2:
            raise ValueError(f"arms: expected at least two (A is the reference), got "
                             f"{len(self.arms)}")
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arms: names must be unique, got {names}")
        parse_order(self.order, len(self.arms))
        if self.resume and self.force:
            raise ValueError("resume and force: choose one (resume keeps finished boots, "
                             "force deletes them)")
        for name in ("max_temp_c", "max_ratio", "max_decode_floor_ratio", "boot_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}: expected a positive number or None, got {value!r}")
        for name in ("gate_timeout_s", "gate_poll_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a positive number, got "
                                 f"{getattr(self, name)!r}")

    @property
    def boot_arms(self) -> tuple[int, ...]:
        return parse_order(self.order, len(self.arms))

    @property
    def cells(self) -> list[tuple[int, int]]:
        return [(p, b) for p in self.prefixes for b in self.batches]

    def plan(self) -> dict:
        """What the measurements depend on: a resumed run must match it field for field."""
        return {"model": self.model, "arms": [a.as_dict() for a in self.arms],
                "order": "".join(arm_letters(len(self.arms))[i] for i in self.boot_arms),
                "prefixes": list(self.prefixes), "batches": list(self.batches),
                "output_tokens": self.output_tokens, "warmup": self.warmup,
                "samples": self.samples, "page_size": self.page_size, "seed": self.seed,
                "device": self.device, "max_temp_c": self.max_temp_c,
                "gate_timeout_s": self.gate_timeout_s, "measure_floor": self.measure_floor}
