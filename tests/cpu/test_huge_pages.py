"""Large CPU allocations (parameters, gradients, moments, the activation arena: 4 MiB and
up) are aligned to 2 MiB and advised MADV_HUGEPAGE (csrc/cpu/backend_cpu.c). Read back from
the kernel's own account of the process's mappings (the `hg` flag of /proc/self/smaps) at
the live parameters' address. Only where Linux offers transparent huge pages. (Small
blocks are not advised, but a test cannot tell: a small block may reuse heap memory that a
freed large one had advised.)"""
import os
import re

import pytest

import manaka as mk

import model_cases as cases

THP = "/sys/kernel/mm/transparent_hugepage/enabled"
pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps") or not os.path.exists(THP)
                                or "[never]" in open(THP).read(),
                                reason="no transparent huge pages on this system")


def advised(address):
    """Whether the mapping holding `address` is advised MADV_HUGEPAGE."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
            if m:
                inside = int(m[1], 16) <= address < int(m[2], 16)
            elif inside and line.startswith("VmFlags"):
                return " hg" in line
    raise AssertionError(f"no mapping holds {address:#x}")


def test_the_parameters_are_advised_huge_pages():
    cfg = cases.config(num_tokens=1200, pair_dim=4)  # 720,600 pair rows x 4: 11.5 MB of parameters
    model = mk.Model(cfg, seed=0)
    mk.Trainer(model, lr=1e-3).step(cases.batch(cfg))
    views = model.parameters()
    assert 4 * sum(a.size for a in views.values()) >= 4 << 20
    start = min(a.ctypes.data for a in views.values())  # one allocation holds them all
    assert start % (2 << 20) == 0
    assert all(advised(a.ctypes.data) for a in views.values())
