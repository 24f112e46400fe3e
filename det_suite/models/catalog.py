"""The shape catalog: model name -> the (N, K) of its FP8 linear projections.

The one place a model's projection shapes are written. They are derived from the model's
dimensions the way a dense decoder lays its linears out (q/k/v fused, gate/up fused), so a
new model is one `ModelDims` line, and the invariance matrix, the GEMM benchmark, the tuner
and the sweep tool all read the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

PROJECTIONS = ("qkv", "o", "gate_up", "down")


@dataclass(frozen=True)
class Projection:
    model: str
    name: str   # one of PROJECTIONS
    n: int      # output features
    k: int      # input features (the reduction dimension)


@dataclass(frozen=True)
class ModelDims:
    """A dense decoder's linear-layer dimensions (from its config.json)."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int

    def projections(self) -> tuple[Projection, ...]:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        shapes = {"qkv": (q + 2 * kv, self.hidden), "o": (self.hidden, q),
                  "gate_up": (2 * self.intermediate, self.hidden),
                  "down": (self.hidden, self.intermediate)}
        return tuple(Projection(self.name, p, *shapes[p]) for p in PROJECTIONS)


# Dimensions from each model's published config.json.
MODELS: dict[str, ModelDims] = {dims.name: dims for dims in (
    ModelDims("qwen3-4b", hidden=2560, heads=32, kv_heads=8, head_dim=128, intermediate=9728),
    ModelDims("qwen3-8b", hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=12288),
    ModelDims("qwen3-14b", hidden=5120, heads=40, kv_heads=8, head_dim=128, intermediate=17408),
    ModelDims("qwen3-32b", hidden=5120, heads=64, kv_heads=8, head_dim=128, intermediate=25600),
    ModelDims("llama-3.1-8b", hidden=4096, heads=32, kv_heads=8, head_dim=128,
              intermediate=14336),
    ModelDims("llama-3.1-70b", hidden=8192, heads=64, kv_heads=8, head_dim=128,
              intermediate=28672),
    ModelDims("mistral-small-24b", hidden=5120, heads=32, kv_heads=8, head_dim=128,
              intermediate=32768),
)}


def model_dims(name: str) -> ModelDims:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"model {name!r} is not in the shape catalog; expected one of "
                         f"{', '.join(MODELS)}") from None


def projections(name: str) -> tuple[Projection, ...]:
    return model_dims(name).projections()
