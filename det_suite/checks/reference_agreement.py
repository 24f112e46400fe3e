"""Is the fast path right, not only stable? det mode's selected-token logprobs against an fp32
forward of the same checkpoint with every FP8 weight dequantized and no activation
quantization (`models.reference`), beside the stock control's distance from it.

Neither arm can equal the reference: both quantize activations to e4m3 (3 mantissa bits,
relative error up to 2**-4 per value) and run BF16 between ops, so how far that rounding
moves a logprob depends on the model (on the tiny synthetic preset both arms reach ~0.5).
What the check claims is relative to the stock path, which shares that rounding: det mode's
mean and max |delta| are each within `stock_margin` x the stock path's. A wrong forward (a
transposed weight, a lost scale, a wrong attention offset) moves logprobs by whole units and
fails it. `tolerance`, when given, is an absolute gate on det's max |delta| as well.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from det_suite.backends.interface import Request

DEFAULT_STOCK_MARGIN = 1.25


@dataclass(frozen=True)
class ReferenceSettings:
    model: str = "synthetic:tiny?seed=0"
    prompts: int = 4
    prompt_len: int = 64
    max_new_tokens: int = 8
    tolerance: float | None = None
    stock_margin: float = DEFAULT_STOCK_MARGIN
    seed: int = 0
    device: str | None = None
    progress: Callable[[str], None] | None = print

    def __post_init__(self) -> None:
        for name in ("prompts", "prompt_len", "max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if self.prompt_len < 2:
            raise ValueError(f"prompt_len: expected >= 2 (a logprob needs a context), got "
                             f"{self.prompt_len}")
        for name in ("tolerance", "stock_margin"):
            value = getattr(self, name)
            if value is None and name == "tolerance":
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}: expected a positive number, got {value!r}")


@dataclass
class ArmDistance:
    mode: str
    logprobs: int            # how many logprobs were compared
    max_abs: float
    mean_abs: float


@dataclass
class ReferenceResult:
    settings: dict
    arms: dict[str, ArmDistance] = field(default_factory=dict)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"kind": "reference_agreement", "ok": self.passed, "settings": self.settings,
                "arms": {k: asdict(v) for k, v in self.arms.items()},
                "seconds": self.seconds, "passed": self.passed, "problems": self.problems}

    def markdown(self) -> str:
        s = self.settings
        lines = [f"# Reference agreement: {s['model']}", "",
                 f"{s['prompts']} prompts of {s['prompt_len']} tokens + {s['max_new_tokens']} "
                 "generated; selected-token logprobs against the fp32 dequantized forward.", "",
                 "| arm | logprobs | max abs delta | mean abs delta |", "| --- | --- | --- | --- |"]
        for arm in self.arms.values():
            lines.append(f"| {arm.mode} | {arm.logprobs} | {arm.max_abs:.4g} | "
                         f"{arm.mean_abs:.4g} |")
        gate = f"det's mean and max within {s['stock_margin']}x stock's"
        if s["tolerance"] is not None:
            gate += f", det's max <= {s['tolerance']}"
        lines += ["", f"{gate}: **{'PASS' if self.passed else 'FAIL'}**"]
        lines += [f"- {p}" for p in self.problems]
        return "\n".join(lines) + "\n"


def run_reference_agreement(s: ReferenceSettings) -> ReferenceResult:
    from det_suite.backends.open import open_backend
    from det_suite.models.reference import reference_logprobs, reference_model
    from det_suite.models.spec import load_model

    say = s.progress or (lambda _line: None)
    started = time.perf_counter()
    device = s.device or ("cuda" if torch.cuda.is_available() else "cpu")
    checkpoint = load_model(s.model, device=device)
    vocab = checkpoint.config.vocab_size
    gen = torch.Generator().manual_seed(s.seed)
    prompts = [tuple(int(t) for t in torch.randint(0, vocab, (s.prompt_len,), generator=gen))
               for _ in range(s.prompts)]
    requests = [Request(p, s.max_new_tokens, logprobs_from=1) for p in prompts]
    page = 16
    longest = s.prompt_len + s.max_new_tokens + 1
    outputs = {}
    for mode in ("det", "stock"):
        backend = open_backend("embedded", s.model, mode=mode, device=device,
                               checkpoint=checkpoint, page_size=page,
                               max_seq_len=-(-longest // page) * page,
                               num_pages=None if device != "cpu"
                               else 4 * s.prompts * (longest // page + 2))
        try:
            outputs[mode] = backend.generate(requests)
        finally:
            backend.close()
        say(f"  {mode}: generated {s.prompts} x {s.max_new_tokens} tokens")
    # The reference scores each arm's own token path (their greedy tokens may differ).
    # One layer in fp32 at a time (the same logits): a 14B or 32B shape's whole fp32 model
    # does not fit beside its FP8 checkpoint on one GPU.
    model = reference_model(checkpoint, layer_by_layer=True)
    result = ReferenceResult(settings={k: v for k, v in asdict(s).items() if k != "progress"})
    for mode, completions in outputs.items():
        deltas = []
        for prompt, completion in zip(prompts, completions):
            ids = list(prompt) + list(completion.output_ids)
            ref = reference_logprobs(checkpoint, ids, model=model)
            deltas.append((torch.tensor(completion.logprobs) - ref).abs())
        delta = torch.cat(deltas)
        result.arms[mode] = ArmDistance(mode, int(delta.numel()), float(delta.max()),
                                        float(delta.mean()))
        say(f"  {mode}: max |delta| {float(delta.max()):.4g}, mean {float(delta.mean()):.4g} "
            f"over {delta.numel()} logprobs")
    del model
    det, stock = result.arms["det"], result.arms["stock"]
    if s.tolerance is not None and det.max_abs > s.tolerance:
        result.problems.append(f"det mode is {det.max_abs:.4g} from the reference somewhere "
                               f"(tolerance {s.tolerance})")
    for stat in ("mean_abs", "max_abs"):
        if getattr(det, stat) > s.stock_margin * getattr(stock, stat):
            result.problems.append(
                f"det mode's {stat.replace('_abs', '')} distance {getattr(det, stat):.4g} "
                f"exceeds {s.stock_margin}x the stock path's {getattr(stock, stat):.4g}")
    result.seconds = time.perf_counter() - started
    return result
