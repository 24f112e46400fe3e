import pytest
import torch


@pytest.fixture
def device():
    """Where CPU-sized kernel tests run: the GPU when there is one, else the interpreter."""
    from det_suite.platform.interpreter import interpreter_active
    return "cpu" if interpreter_active() or not torch.cuda.is_available() else "cuda"

