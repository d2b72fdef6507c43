"""Fixtures of the CUDA tests."""
import pytest

import backend_table as bt


@pytest.fixture(scope="module")
def backends():
    """(the CUDA backend's op table, the CPU's), for comparing an entry's bits; skipped,
    saying why, where there is no CUDA backend."""
    cuda, cpu = bt.table("cuda"), bt.table("cpu")
    if isinstance(cuda, str):
        pytest.skip(f"no cuda backend: {cuda}")
    yield cuda, cpu
    cuda.close()
    cpu.close()
