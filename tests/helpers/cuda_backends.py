"""The `backends` fixture of the CUDA op tests (a test module imports it by name)."""
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
