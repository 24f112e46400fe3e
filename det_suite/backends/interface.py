"""The one interface every backend serves: generate with logprobs, say what was a cache hit,
flush the cache. Checks talk to this, never to an engine or a server directly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class Request:
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    logprobs_from: int = 0          # first prompt position whose logprob is returned


@dataclass(frozen=True)
class Completion:
    output_ids: tuple[int, ...]
    logprobs: tuple[float, ...]     # selected-token logprobs, prompt (from logprobs_from) + output
    cached_tokens: int              # prompt tokens served from the prefix cache


def engine_label(cuda_graph: bool, chunk_size: int | None = None) -> str:
    """How an engine configuration is named in results and logs: "eager" / "graph", plus
    "-chunkN" when prefill is chunked."""
    return ("graph" if cuda_graph else "eager") + (f"-chunk{chunk_size}" if chunk_size else "")


class Backend(Protocol):
    name: str

    def generate(self, requests: Sequence[Request]) -> list[Completion]: ...

    def flush_cache(self) -> None: ...

    def close(self) -> None: ...
