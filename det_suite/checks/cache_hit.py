"""Cache-hit matrix: same selected-token logprobs cold and after a prefix-cache hit, alone or
batched, graph or eager (issue 12).

For every engine (mode det or stock x eager / graph / chunked prefill) and every case
(prefix length x batch size x repetition), on fixed random token ids:
  1. flush; cold: the target prompt (prefix + suffix) in a batch with `batch - 1` other
     requests: the reference, nothing cached;
  2. flush; prime: prefix + another suffix, alone, so the prefix's pages are cached;
  3. hit: the target again, among different neighbours: only its uncached suffix is
     prefilled, against the cached prefix KV;
  4. warm: the target once more (its own pages now cached too).
Hit and warm are each compared with cold bit for bit: the selected-token logprobs of the
prompt suffix and of every generated token (torch.equal on fp32) and the generated ids. A
hit that reports no cached tokens fails its case: equality proves nothing without reuse.
Across engines of a mode, each engine's cold outputs are compared with the first engine's
(graph vs eager, chunked vs unchunked prefill).

Det mode must be exact everywhere; the stock control is reported beside it. If the control
shows no difference anywhere, the report says the control did not reproduce, so nothing in
it claims a fix it did not show.

The m-dependent arm (embedded backend, on by default; `engine.m_dependent`) is the positive
control: det's op set with FP8 linears whose schedule follows M. Its hits must differ from
its cold prefill in at least one comparison with a proven hit; if none does, this check
could not show that it detects a schedule change on this runner, and it fails (exit 1)
whatever det mode did.

Any backend `backends.open.open_backend` knows runs the matrix (settings.backend): the
embedded engine (det: det-suite's op set, stock: torch/vendor ops), or SGLang (det: the
det-suite plugin arm, stock: the upstream arm; one server boot per mode and engine, or the
one server at settings.server_url).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from det_suite.backends.interface import Backend, Completion, Request, engine_label
from det_suite.engine.m_dependent import MODE as M_DEPENDENT

# Modes per backend when none are named: the m-dependent positive control needs det-suite's
# own engine (an SGLang server runs only its det or upstream arm).
DEFAULT_MODES = {"embedded": ("det", "stock", M_DEPENDENT), "sglang": ("det", "stock")}
KNOWN_MODES = ("det", "stock", M_DEPENDENT)
# The phases in which the protocol claims a cache hit (the others compare cold runs).
HIT_PHASES = ("hit", "warm")
NOT_SHOWN = ("this check could not show that it detects a schedule change on this runner")

PRESETS = {
    # The seed's matrix: prefix 128 / 1024 / 4096 x batch 1 / 4 / 2 x 2 repetitions.
    "full": dict(prefixes=(128, 1024, 4096), batches=(1, 4, 2), repetitions=2, suffix=32,
                 max_new_tokens=16, page_size=16),
    # CPU-sized: the same protocol on tens of tokens (kernels on the Triton interpreter).
    "small": dict(prefixes=(12,), batches=(1, 2), repetitions=1, suffix=5, max_new_tokens=2,
                  page_size=4),
}


@dataclass(frozen=True)
class EngineVariant:
    cuda_graph: bool = False
    chunk_size: int | None = None

    @property
    def label(self) -> str:
        return engine_label(self.cuda_graph, self.chunk_size)


@dataclass(frozen=True)
class CacheHitSettings:
    model: str = "synthetic:tiny?seed=0"
    backend: str = "embedded"
    modes: tuple[str, ...] | None = None   # None: DEFAULT_MODES[backend]
    variants: tuple[EngineVariant, ...] = (EngineVariant(False), EngineVariant(True))
    prefixes: tuple[int, ...] = PRESETS["full"]["prefixes"]
    batches: tuple[int, ...] = PRESETS["full"]["batches"]
    repetitions: int = 2
    suffix: int = 32
    max_new_tokens: int = 16
    page_size: int = 16
    seed: int = 0
    device: str | None = None
    server_url: str | None = None       # sglang: attach to this server instead of booting
    backend_options: dict[str, Any] = field(default_factory=dict)  # to open_backend
    progress: Callable[[str], None] | None = print

    def __post_init__(self) -> None:
        from det_suite.backends.open import BACKENDS

        if self.backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got "
                             f"{self.backend!r}")
        if self.server_url is not None:
            if self.backend != "sglang":
                raise ValueError(f"server_url: only the sglang backend attaches to a server; "
                                 f"backend is {self.backend!r}")
            if not str(self.server_url).startswith(("http://", "https://")):
                raise ValueError(f"server_url: expected http://HOST:PORT, got "
                                 f"{self.server_url!r}")
            if len(self.modes) != 1 or len(self.variants) != 1:
                raise ValueError("server_url: a running server is one arm and one engine; "
                                 f"name exactly one mode and one engine (got modes "
                                 f"{self.modes}, {len(self.variants)} engines)")
        for name in ("prefixes", "batches"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"{name}: expected positive ints, got {values!r}")
        for name in ("repetitions", "suffix", "max_new_tokens", "page_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if any(p < self.page_size for p in self.prefixes):
            raise ValueError(f"prefixes: each must be >= page_size ({self.page_size}) or no "
                             f"page can be cached; got {self.prefixes}")
        if self.modes is None:
            object.__setattr__(self, "modes", DEFAULT_MODES[self.backend])
        unknown = set(self.modes) - set(KNOWN_MODES)
        if not self.modes or unknown:
            raise ValueError(f"modes: expected some of {', '.join(KNOWN_MODES)}, got "
                             f"{self.modes!r}")
        if M_DEPENDENT in self.modes and self.backend != "embedded":
            raise ValueError(f"modes: {M_DEPENDENT} runs on the embedded engine only; the "
                             f"{self.backend} backend has det and stock")


@dataclass
class Comparison:
    mode: str
    engine: str
    prefix: int
    batch: int
    rep: int
    phase: str              # "hit" / "warm": vs cold on this engine; "cold-vs-<engine>"
    cached_tokens: int      # the compared request's cached prompt tokens (cold: 0)
    values: int             # logprobs compared
    max_abs_delta: float
    tokens_equal: bool
    exact: bool
    hit_proven: bool        # cached_tokens > 0 where a hit is claimed (True for cross rows)
    cold_logprobs: list[float] = field(default_factory=list)
    other_logprobs: list[float] = field(default_factory=list)
    cold_ids: list[int] = field(default_factory=list)
    other_ids: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.exact and self.hit_proven


@dataclass
class CacheHitResult:
    settings: dict
    comparisons: list[Comparison]
    seconds: float
    skipped: list[str]
    # "mode/engine" -> the backend's routing counts, where it reports them (SGLang's det
    # arm: linear layers routed to det-suite vs upstream).
    routing: dict = field(default_factory=dict)
    # "mode/engine" -> tensor / data parallel sizes, where the backend reports them (SGLang).
    parallel: dict = field(default_factory=dict)

    def rows(self, mode: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.mode == mode]

    @property
    def det_exact(self) -> bool:
        rows = self.rows("det")
        return bool(rows) and all(c.passed for c in rows)

    @property
    def control_reproduced(self) -> bool | None:
        rows = self.rows("stock")
        return None if not rows else any(not c.exact for c in rows)

    def control_differences(self) -> list[Comparison]:
        """The positive control's comparisons that flag it: a proven hit whose outputs differ
        from the cold prefill's."""
        return [c for c in self.rows(M_DEPENDENT)
                if c.phase in HIT_PHASES and c.hit_proven and not c.exact]

    @property
    def control_flagged(self) -> bool | None:
        """None where the positive control did not run."""
        if M_DEPENDENT not in self.settings["modes"]:
            return None
        return bool(self.control_differences())

    @property
    def exit_code(self) -> int:
        if "det" in self.settings["modes"] and not self.det_exact:
            return 1
        return 1 if self.control_flagged is False else 0


# -- prompts ---------------------------------------------------------------------------------

def _ids(gen: torch.Generator, count: int, vocab: int) -> tuple[int, ...]:
    return tuple(torch.randint(0, vocab, (count,), generator=gen).tolist())


@dataclass(frozen=True)
class CasePrompts:
    target: Request
    primer: Request
    neighbours: dict[str, tuple[Request, ...]]   # phase -> the other requests of its batch


def case_prompts(s: CacheHitSettings, prefix: int, batch: int, rep: int,
                 vocab: int) -> CasePrompts:
    gen = torch.Generator().manual_seed(s.seed * 1_000_003 + prefix * 101 + batch * 7 + rep)
    shared = _ids(gen, prefix, vocab)
    target = Request(shared + _ids(gen, s.suffix, vocab), s.max_new_tokens,
                     logprobs_from=prefix)
    primer = Request(shared + _ids(gen, s.suffix, vocab), 1, logprobs_from=prefix)
    neighbours = {}
    for phase in ("cold", "hit", "warm"):
        # Ragged neighbours, different in every phase: the target's batch changes shape.
        neighbours[phase] = tuple(
            Request(_ids(gen, max(1, prefix // (i + 2) + 3 * i + 1), vocab),
                    s.max_new_tokens, logprobs_from=1) for i in range(batch - 1))
    return CasePrompts(target, primer, neighbours)


def _batch(prompts: CasePrompts, phase: str, rep: int) -> tuple[list[Request], int]:
    """The phase's batch and the target's index in it (moves between phases)."""
    others = list(prompts.neighbours[phase])
    at = {"cold": 0, "hit": len(others), "warm": (rep + 1) % (len(others) + 1)}[phase]
    return others[:at] + [prompts.target] + others[at:], at


def _run_phase(backend: Backend, prompts: CasePrompts, phase: str, rep: int) -> Completion:
    requests, at = _batch(prompts, phase, rep)
    return backend.generate(requests)[at]


def compare_completions(cold: Completion, other: Completion) -> tuple[int, float, bool, bool]:
    """(values compared, max |delta|, ids equal, exact): torch.equal on the fp32 values."""
    a = torch.tensor(cold.logprobs, dtype=torch.float32)
    b = torch.tensor(other.logprobs, dtype=torch.float32)
    tokens_equal = cold.output_ids == other.output_ids
    if a.shape != b.shape:
        return max(a.numel(), b.numel()), float("inf"), tokens_equal, False
    delta = float((a - b).abs().max()) if a.numel() else 0.0
    return a.numel(), delta, tokens_equal, bool(torch.equal(a, b)) and tokens_equal


def _comparison(mode, engine, prefix, batch, rep, phase, cold, other, *,
                needs_hit: bool) -> Comparison:
    values, delta, tokens_equal, exact = compare_completions(cold, other)
    return Comparison(mode=mode, engine=engine, prefix=prefix, batch=batch, rep=rep,
                      phase=phase, cached_tokens=other.cached_tokens, values=values,
                      max_abs_delta=delta, tokens_equal=tokens_equal, exact=exact,
                      hit_proven=other.cached_tokens > 0 if needs_hit else True,
                      cold_logprobs=list(cold.logprobs), other_logprobs=list(other.logprobs),
                      cold_ids=list(cold.output_ids), other_ids=list(other.output_ids))


def run_engine_cases(backend: Backend, s: CacheHitSettings, mode: str, engine: str,
                     vocab: int, say) -> tuple[list[Comparison], dict]:
    """Every case on one backend; returns its comparisons and its cold completions."""
    rows, colds = [], {}
    for prefix in s.prefixes:
        for batch in s.batches:
            for rep in range(s.repetitions):
                prompts = case_prompts(s, prefix, batch, rep, vocab)
                started = time.perf_counter()
                backend.flush_cache()
                cold = _run_phase(backend, prompts, "cold", rep)
                if cold.cached_tokens:
                    raise RuntimeError(f"{backend.name}: the cold request reported "
                                       f"{cold.cached_tokens} cached tokens after a flush")
                backend.flush_cache()
                backend.generate([prompts.primer])
                for phase in ("hit", "warm"):
                    other = _run_phase(backend, prompts, phase, rep)
                    rows.append(_comparison(mode, engine, prefix, batch, rep, phase, cold,
                                            other, needs_hit=True))
                colds[(prefix, batch, rep)] = cold
                last = rows[-2:]
                say(f"  {mode:5} {engine:12} prefix {prefix:5} batch {batch} rep {rep}: "
                    + ", ".join(f"{c.phase} cached {c.cached_tokens} "
                                f"{'exact' if c.exact else f'delta {c.max_abs_delta:.3g}'}"
                                for c in last)
                    + f" ({time.perf_counter() - started:.1f} s)")
    return rows, colds


def _embedded_factory(s: CacheHitSettings):
    from det_suite.backends.open import open_backend
    from det_suite.models.spec import load_model

    device = s.device or ("cuda" if torch.cuda.is_available() else "cpu")
    checkpoint = load_model(s.model, device=device)
    longest = max(s.prefixes) + 2 * s.suffix + s.max_new_tokens + 1

    def make(mode: str, variant: EngineVariant):
        return open_backend("embedded", s.model, mode=mode, cuda_graph=variant.cuda_graph,
                            device=device, checkpoint=checkpoint, page_size=s.page_size,
                            chunk_size=variant.chunk_size,
                            max_seq_len=-(-longest // s.page_size) * s.page_size,
                            num_pages=None if device != "cpu" else 512,
                            **s.backend_options)
    return make, checkpoint.config.vocab_size, device


def _sglang_factory(s: CacheHitSettings):
    """One server per (mode, engine), booted and stopped by the check; or the server at
    s.server_url for the one mode and engine it was started as. The server's GPU is the
    device, so CUDA Graph engines are never skipped here."""
    from det_suite.backends.open import open_backend
    from det_suite.backends.sglang.backend import model_vocab

    def make(mode: str, variant: EngineVariant):
        if s.server_url is not None:
            return open_backend("sglang", s.model, mode=mode, cuda_graph=variant.cuda_graph,
                                url=s.server_url, progress=s.progress, **s.backend_options)
        return open_backend("sglang", s.model, mode=mode, cuda_graph=variant.cuda_graph,
                            chunk_size=variant.chunk_size, page_size=s.page_size,
                            progress=s.progress, **s.backend_options)
    return make, model_vocab(s.model), "cuda"


FACTORIES = {"embedded": _embedded_factory, "sglang": _sglang_factory}


def run_cache_hit(settings: CacheHitSettings, *, backend_factory=None,
                  vocab: int | None = None) -> CacheHitResult:
    """Run the matrix. backend_factory(mode, variant) -> Backend (default: settings.backend
    on settings.model, through open_backend); vocab: the token-id range (read from the
    model by default)."""
    s, say = settings, settings.progress or (lambda _line: None)
    started = time.perf_counter()
    device = s.device or "cpu"
    if backend_factory is None:
        backend_factory, vocab, device = FACTORIES[s.backend](s)
    if vocab is None:
        raise ValueError("vocab: required with a custom backend_factory")
    comparisons, skipped, routing, parallel = [], [], {}, {}
    for mode in s.modes:
        base_colds, base_label = None, None
        for variant in s.variants:
            if variant.cuda_graph and torch.device(device).type != "cuda":
                skipped.append(f"{mode}/{variant.label}: CUDA Graphs need a CUDA device")
                say(f"  {mode:5} {variant.label:12} skipped: CUDA Graphs need a CUDA device")
                continue
            backend = backend_factory(mode, variant)
            if getattr(backend, "routing", None) is not None:
                routing[f"{mode}/{variant.label}"] = backend.routing
            if getattr(backend, "parallel", None) is not None:
                parallel[f"{mode}/{variant.label}"] = backend.parallel
            try:
                rows, colds = run_engine_cases(backend, s, mode, variant.label, vocab, say)
            finally:
                backend.close()
            comparisons += rows
            if base_colds is None:
                base_colds, base_label = colds, variant.label
                continue
            for (prefix, batch, rep), cold in colds.items():
                comparisons.append(_comparison(mode, variant.label, prefix, batch, rep,
                                               f"cold-vs-{base_label}", base_colds[
                                                   (prefix, batch, rep)], cold,
                                               needs_hit=False))
    payload = {k: v for k, v in asdict(s).items() if k != "progress"}
    return CacheHitResult(settings=payload, comparisons=comparisons,
                          seconds=time.perf_counter() - started, skipped=skipped,
                          routing=routing, parallel=parallel)
