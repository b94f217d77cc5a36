import pytest


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Small batches of MiniLM on a shared 2-core machine: one thread is faster than two
    that spin (a 4 x 96 batch: 0.3 s against 2.4-4.6 s at load 20)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
