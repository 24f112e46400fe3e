import pytest
import torch


@pytest.fixture(scope="session")
def kernel_device():
    """Where CPU-sized kernel tests run: the GPU when there is one, else the interpreter
    (session-scoped, for module fixtures that compute once)."""
    from det_suite.platform.interpreter import interpreter_active
    return "cpu" if interpreter_active() or not torch.cuda.is_available() else "cuda"


@pytest.fixture
def device(kernel_device):
    return kernel_device
