"""Tiny synthetic checkpoints shared by the model-level tests (built once per session)."""

import shutil

import pytest

# Small enough that a 2-layer tiny model lands in several shards, so the index path is tested.
SHARD_BYTES = 16 * 1024


def _built(preset):
    from det_suite.models.synthetic import build_synthetic
    return build_synthetic(preset, 0)


def _written(preset, folder):
    from det_suite.models.synthetic import write_synthetic
    return write_synthetic(preset, 0, folder)


@pytest.fixture(scope="session")
def tiny():
    return _built("tiny")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return _written("tiny", tmp_path_factory.mktemp("tiny-single"))


@pytest.fixture(scope="session")
def tiny_tied():
    """tiny with its lm_head tied to the embedding (the small Qwen3s' layout)."""
    return _built("tiny-tied")


@pytest.fixture(scope="session")
def tiny_tied_dir(tmp_path_factory):
    return _written("tiny-tied", tmp_path_factory.mktemp("tiny-tied"))


@pytest.fixture(scope="session")
def tiny_sharded_dir(tmp_path_factory):
    from det_suite.models.synthetic import write_synthetic
    return write_synthetic("tiny", 0, tmp_path_factory.mktemp("tiny-sharded"),
                           max_shard_bytes=SHARD_BYTES)


@pytest.fixture
def sharded_copy(tiny_sharded_dir, tmp_path):
    """A private copy of the sharded tiny checkpoint that a test may tamper with."""
    return shutil.copytree(tiny_sharded_dir, tmp_path / "ckpt")


def _state_bytes(ckpt) -> dict:
    import torch
    return {name: (t.dtype, tuple(t.shape),
                   t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            for name, t in ckpt.state_dict().items()}


@pytest.fixture(scope="session")
def state_bytes():
    """ckpt -> {name: (dtype, shape, raw bytes)}: equality of two of these is byte equality."""
    return _state_bytes


def _two_request_completions(ckpt, ops, device):
    from det_suite.backends.interface import Request
    from det_suite.engine import Engine

    engine = Engine(ckpt, mode="det", ops=ops, page_size=4, max_seq_len=32, num_pages=24,
                    device=device)
    prompts = [tuple(range(3, 12)), tuple(range(40, 45))]
    return engine.generate([Request(prompt_ids=p, max_new_tokens=3, logprobs_from=1)
                            for p in prompts])


@pytest.fixture(scope="session")
def completions_with():
    """(ckpt, op set, device) -> the completions of two requests (prefill, 3 decode steps,
    every logprob) through a det engine built with that op set: what the fused and stacked
    op sets are compared on against their unfused forms."""
    return _two_request_completions
