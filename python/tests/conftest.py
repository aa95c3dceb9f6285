"""Each test draws from torch's generator seeded by its own id, so that its random inputs do
not depend on which other tests ran before it or which test files were collected."""

import zlib

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_per_test(request):
    # module and test name with its parameters: the same wherever pytest runs from
    key = f"{request.node.module.__name__}::{request.node.name}"
    torch.manual_seed(zlib.crc32(key.encode()))
