"""Tiny synthetic checkpoints shared by the model-level tests (built once per session)."""

import shutil

import pytest

# Small enough that a 2-layer tiny model lands in several shards, so the index path is tested.
SHARD_BYTES = 16 * 1024


@pytest.fixture(scope="session")
def tiny():
    from det_suite.models.synthetic import build_synthetic
    return build_synthetic("tiny", 0)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from det_suite.models.synthetic import write_synthetic
    return write_synthetic("tiny", 0, tmp_path_factory.mktemp("tiny-single"))


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
