"""Fixtures for the validators' tests: a one-rank gloo process group in this process (real
torch.distributed, no network)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

# The tiny models here train faster on one thread, and the suite shares 2 cores with the
# torchrun workers some tests start.
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world1():
    """A real one-rank gloo process group (an in-process store, so nothing listens)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()
