"""`qk_norm_rope_write` keeps a bad slot out of the memory around the caches.

The op refuses a slot outside the caches before launch only where it can read the mapping
without a sync (CPU tensors); on a GPU, and in a captured CUDA graph, the kernel's guard is
all that stands between a bad slot and whatever memory lies beyond the cache. Here the host
check is switched off and each cache is a view into a larger buffer, so a write through a bad
slot lands in a guard block that must come back untouched, while the good slots are written
like the unfused sequence's (the launch ran)."""

import pytest
import torch

from det_suite.ops import batch_invariant
from det_suite.ops.batch_invariant import qk_norm_rope_write
from tests.unit.ops.test_qk_norm_rope import BLOCKS, PAGE, _inputs, _run, _unfused

TOKENS, Q_HEADS, KV_HEADS, HEAD_DIM = 3, 2, 2, 16
GUARD_BLOCKS = 1

# (bad slot, where the guard block lies): just past the last slot, or just before slot 0.
BAD_SLOTS = {"past-the-end": (BLOCKS * PAGE, "after"), "negative": (-1, "before")}


def _guarded(buffer: torch.Tensor, guard_at: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(the cache view of BLOCKS blocks, the guard block view) inside `buffer`."""
    if guard_at == "after":
        return buffer[:BLOCKS], buffer[BLOCKS:]
    return buffer[GUARD_BLOCKS:], buffer[:GUARD_BLOCKS]


@pytest.mark.parametrize("bad_slot, guard_at", list(BAD_SLOTS.values()), ids=list(BAD_SLOTS))
def test_a_bad_slot_writes_nothing_beyond_the_caches(monkeypatch, device, bad_slot, guard_at):
    monkeypatch.setattr(batch_invariant, "_check_slots", lambda *_: None)
    inputs = _inputs(TOKENS, Q_HEADS, KV_HEADS, HEAD_DIM, torch.bfloat16, device,
                     blocks=BLOCKS + GUARD_BLOCKS)
    good = torch.tensor([0, BLOCKS * PAGE - 1], device=device)
    slot_mapping = torch.cat([good[:1], torch.tensor([bad_slot], device=device), good[1:]])
    buffers = {name: inputs[name].clone() for name in ("k_cache", "v_cache")}
    caches = {name: _guarded(buffers[name], guard_at) for name in buffers}
    guards_before = {name: guard.clone() for name, (_, guard) in caches.items()}
    args = dict(inputs, slot_mapping=slot_mapping,
                **{name: cache for name, (cache, _) in caches.items()})

    qk_norm_rope_write(**args)

    for name, (_, guard) in caches.items():
        assert torch.equal(guard, guards_before[name]), f"{name}: the guard block was written"
    # The good tokens' rows, as the unfused sequence writes them into a cache of its own.
    good_args = dict(args, **{n: inputs[n][:BLOCKS].clone() for n in ("k_cache", "v_cache")},
                     **{n: args[n][[0, 2]] for n in ("q", "k", "v", "cos", "sin")},
                     slot_mapping=good)
    _, k_ref, v_ref = _run(_unfused, good_args)
    for name, ref in (("k_cache", k_ref), ("v_cache", v_ref)):
        cache = caches[name][0].flatten(0, 1)
        assert torch.equal(cache[good], ref.flatten(0, 1)[good]), f"{name}: a good slot"
