"""One GSM8K run on a backend: rows -> prompts -> greedy outputs -> per-row hashes and answers.

Greedy decoding, `max_new_tokens` per row, rows sent `batch_size` at a time. The embedded
engine always decodes max_new_tokens tokens (EOS ignored); the output kept is what precedes
the first stop id (`prompts.stop_ids`), so a difference after a stop is not one. The prefix
cache is left on between batches (few-shot prompts share a prefix), as a server runs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from det_suite.gsm8k.prompts import PROMPT_FORMAT, PromptOptions

PRESETS = {
    # The seed's run: GSM8K test rows 32-159, 512 new tokens.
    "full": dict(rows=tuple(range(32, 160)), max_new_tokens=512, batch_size=32),
    # CPU-sized: kernels on the Triton interpreter cost ~0.2 s per prompt token with the tiny
    # model, so one row, no instruction (the question alone), 4 new tokens.
    "small": dict(rows=(32,), max_new_tokens=4, batch_size=1,
                  prompt=PromptOptions(instruction=False)),
}
STOP_HANDLING = ("the engine decodes max_new_tokens greedily; the output is cut before the "
                 "first stop id (EOS of the tokenizer, config and generation config)")


@dataclass(frozen=True)
class Gsm8kSettings:
    model: str = "synthetic:tiny?seed=0"
    backend: str = "embedded"
    mode: str = "det"
    cuda_graph: bool | None = None      # None: CUDA Graph decode on CUDA, eager elsewhere
    device: str | None = None           # None: cuda when available
    data: str = "synthetic"
    data_config: str = "main"
    split: str = "test"
    rows: tuple[int, ...] = PRESETS["full"]["rows"]
    shots: int = 0                      # exemplars: rows 0..shots-1 of the same split
    max_new_tokens: int = 512
    batch_size: int = 32
    prompt: PromptOptions = PromptOptions()
    page_size: int = 16
    # det mode: every FP8 linear at this many pipeline stages (None: each tile's own). How
    # the work runs, not what it is: a fixture recorded with the table's depths checks it.
    stages: int | None = None
    keep_texts: bool = True             # output texts in the result (fixtures drop them)
    progress: bool = True

    def __post_init__(self) -> None:
        if self.stages is not None:
            from det_suite.policy import SUPPORTED_STAGES
            if self.stages not in SUPPORTED_STAGES or isinstance(self.stages, bool):
                raise ValueError(f"stages: expected one of {SUPPORTED_STAGES}, got "
                                 f"{self.stages!r}")
            if self.mode != "det" or self.backend != "embedded":
                raise ValueError(f"stages: pins det-suite's FP8 kernel, so it needs mode det "
                                 f"on the embedded backend; got mode {self.mode!r}, backend "
                                 f"{self.backend!r}")
        for name in ("max_new_tokens", "batch_size", "page_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if isinstance(self.shots, bool) or not isinstance(self.shots, int) or self.shots < 0:
            raise ValueError(f"shots: expected an int >= 0, got {self.shots!r}")
        rows = tuple(self.rows)
        if not rows or any(isinstance(r, bool) or not isinstance(r, int) or r < 0
                           for r in rows) or len(set(rows)) != len(rows):
            raise ValueError(f"rows: expected distinct non-negative ints, got {self.rows!r}")
        overlap = sorted(set(rows) & set(range(self.shots)))
        if overlap:
            raise ValueError(f"rows: {overlap[:5]} are also few-shot exemplars (rows 0.."
                             f"{self.shots - 1}); choose rows >= shots")
        if self.mode not in ("det", "stock", "m-dependent"):
            raise ValueError(f"mode: expected det, stock or m-dependent, got {self.mode!r}")
        from det_suite.gsm8k.data import parse_source
        parse_source(self.data, config=self.data_config, split=self.split)

    def resolved_device(self) -> str:
        import torch
        return self.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def resolved_graph(self, device: str) -> bool:
        import torch
        return (torch.device(device).type == "cuda" if self.cuda_graph is None
                else self.cuda_graph)


@dataclass
class Gsm8kRun:
    key: dict
    policy: dict
    settings: dict
    rows: list[dict]
    seconds: float
    decode: object = field(default=None, repr=False)    # ids -> text, for diff details

    @property
    def summary(self) -> dict:
        from det_suite.gsm8k.fixture import summarize
        return summarize(self.rows)

    def headline(self) -> str:
        s = self.summary
        return (f"{s['correct']}/{s['rows']} correct; final answer after '####' in "
                f"{s['answers']['marker']}, last number only in {s['answers']['last-number']}, "
                f"none in {s['answers']['none']}; {s['stopped']}/{s['rows']} stopped before "
                f"{self.settings['max_new_tokens']} tokens")

    def payload(self, environment: dict | None, *, texts: bool = True) -> dict:
        from det_suite.gsm8k.fixture import KIND, SCHEMA

        rows = self.rows if texts else [{k: v for k, v in r.items() if k != "text"}
                                        for r in self.rows]
        return {"kind": KIND, "schema": SCHEMA, "headline": self.headline(), "key": self.key,
                "policy": self.policy, "settings": self.settings, "summary": self.summary,
                "seconds": round(self.seconds, 3), "rows": rows,
                "environment": environment or {}}


def run_key(settings: Gsm8kSettings, *, model_identity: dict | None = None) -> dict:
    """The key a run of `settings` gets on this machine (no model is loaded for it)."""
    from det_suite.gsm8k import identity

    device = settings.resolved_device()
    platform = identity.platform_key(device)
    return {"model": model_identity or identity.model_identity(settings.model,
                                                               progress=settings.progress),
            "backend": settings.backend, "mode": settings.mode, "platform": platform,
            "stack": identity.stack_key(interpreter=platform["interpreter"])}


def _engine_options(settings: Gsm8kSettings, prompts, graph: bool) -> dict:
    page = settings.page_size
    longest = max(len(p) for p in prompts) + settings.max_new_tokens
    pages_per_seq = math.ceil(longest / page)
    batch = min(settings.batch_size, len(prompts))
    options = {"page_size": page, "max_seq_len": pages_per_seq * page,
               # every sequence of a batch at once, plus room for cached prefixes
               "num_pages": (batch + 1) * pages_per_seq + 1}
    if graph:
        sizes = {2 ** i for i in range(batch.bit_length()) if 2 ** i <= batch} | {batch}
        options["graph_batch_sizes"] = tuple(sorted(sizes))
    return options


def _open_backend(settings, device, graph, checkpoint, prompts):
    from det_suite.backends.open import open_backend

    options = _engine_options(settings, prompts, graph)
    if settings.stages is not None:
        from det_suite.engine.opsets import det_opset
        options["ops"] = det_opset(settings.stages)
    return open_backend(settings.backend, settings.model, mode=settings.mode, cuda_graph=graph,
                        device=device, checkpoint=checkpoint, **options)


def run_gsm8k(settings: Gsm8kSettings, *, key: dict | None = None, backend=None,
              checkpoint=None, tokenizer=None) -> Gsm8kRun:
    """Run `settings` and return every row's hashes and answer. `backend`, `checkpoint`,
    `tokenizer`: already opened ones (tests); by default the model is loaded from
    settings.model and the backend opened through `backends.open.open_backend`."""
    from det_suite.backends.interface import Request
    from det_suite.gsm8k import data, prompts as fmt
    from det_suite.gsm8k.answers import extract_answer
    from det_suite.gsm8k.fixture import output_row
    from det_suite.gsm8k.identity import policy_info

    started = time.perf_counter()
    device = settings.resolved_device()
    graph = settings.resolved_graph(device)
    key = key or run_key(settings)
    # The data first: a bad source or row fails before a model is loaded.
    source = data.parse_source(settings.data, config=settings.data_config, split=settings.split)
    dataset = data.load_split(source, progress=settings.progress)
    problems = data.select(dataset, settings.rows, source=source.spec)
    shots = [(p.question, p.answer)
             for p in data.select(dataset, range(settings.shots), source=source.spec)]
    if checkpoint is None:
        from det_suite.models.spec import load_model
        checkpoint = load_model(settings.model, device=device)
    tokenizer = tokenizer or fmt.load_tokenizer(checkpoint)
    stops = fmt.stop_ids(tokenizer, checkpoint)
    prompt_ids = [fmt.prompt_ids(tokenizer, p.question, shots, settings.prompt)
                  for p in problems]
    own_backend = backend is None
    if own_backend:
        backend = _open_backend(settings, device, graph, checkpoint, prompt_ids)
    rows = []
    bar = _bar(len(problems), settings)
    try:
        for start in range(0, len(problems), settings.batch_size):
            batch = range(start, min(start + settings.batch_size, len(problems)))
            requests = [Request(prompt_ids[i], settings.max_new_tokens,
                                logprobs_from=len(prompt_ids[i])) for i in batch]
            for i, completion in zip(batch, backend.generate(requests)):
                ids, stopped = fmt.cut_at_stop(completion.output_ids, stops)
                text = tokenizer.decode(list(ids), skip_special_tokens=False)
                rows.append(output_row(row=problems[i].row, question=problems[i].question,
                                       prompt=prompt_ids[i], text=text, token_ids=ids,
                                       stopped=stopped, answer=extract_answer(text),
                                       reference=problems[i].reference,
                                       keep_text=settings.keep_texts))
            if bar is not None:
                bar.update(len(batch))
                bar.set_postfix(correct=sum(r["correct"] for r in rows))
    finally:
        if bar is not None:
            bar.close()
        if own_backend:
            backend.close()
    record = {
        "model": settings.model, "backend": settings.backend, "mode": settings.mode,
        "engine": "graph" if graph else "eager", "device": device,
        "data": source.describe(), "rows": list(settings.rows), "shots": settings.shots,
        "max_new_tokens": settings.max_new_tokens, "batch_size": settings.batch_size,
        "prompt": {"format": PROMPT_FORMAT,
                   "style": fmt.resolved_style(tokenizer, settings.prompt),
                   "instruction": settings.prompt.instruction,
                   "thinking": settings.prompt.thinking},
        "stop_ids": list(stops), "stop_handling": STOP_HANDLING,
        "page_size": settings.page_size, "greedy": True,
        # Only where pinned, so a run on the table's own depths records what it always did.
        **({} if settings.stages is None else {"fp8_stages": settings.stages})}
    return Gsm8kRun(key=key, policy=policy_info(key["platform"]["tile_family"]),
                    settings=record, rows=rows, seconds=time.perf_counter() - started,
                    decode=lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False))


def _bar(total: int, settings: Gsm8kSettings):
    if not settings.progress:
        return None
    from det_suite.platform.progress import progress_bar
    return progress_bar(total=total, unit="row", desc=f"gsm8k {settings.mode}")


def settings_from_record(record: dict, **overrides) -> Gsm8kSettings:
    """The settings that repeat a recorded run's work (`overrides`: how it runs here)."""
    prompt = record["prompt"]
    data = record["data"]
    spec = data["spec"]
    values = dict(model=record["model"], backend=record["backend"], mode=record["mode"],
                  cuda_graph=record["engine"] == "graph", device=None, data=spec,
                  data_config=data.get("config", "main"), split=data["split"],
                  rows=tuple(record["rows"]), shots=record["shots"],
                  max_new_tokens=record["max_new_tokens"], batch_size=record["batch_size"],
                  prompt=PromptOptions(style=prompt["style"],
                                       instruction=prompt["instruction"],
                                       thinking=prompt["thinking"]),
                  page_size=record["page_size"])
    values.update({k: v for k, v in overrides.items() if v is not None})
    return replace(Gsm8kSettings(), **values)
