"""OpenMP waits passively (threads sleep between parallel regions) unless the user chose.

libgomp reads OMP_WAIT_POLICY once, when it is loaded, and by default a thread that finishes
its share of a parallel region spins for ~300,000 iterations before sleeping. On a machine
whose cores are shared with other processes, the spinning threads take the cores the
working ones need: under load, most of a training step's samples were libgomp spin-waits,
and ``shogi.policy`` ran 40-100x slower with 2 threads than with 1. Passive waiting costs a
futex wake (microseconds) per parallel region on an idle machine, which manaka's regions
(milliseconds each at training sizes) do not notice.

This module must be imported before manaka's C core loads libgomp (manaka/__init__.py
imports it first). It has no effect when libgomp was already loaded by something else in the
process before manaka, nor when OMP_WAIT_POLICY is set in the environment: export
``OMP_WAIT_POLICY=active`` to get libgomp's spinning back (e.g. on a dedicated machine).
"""
from __future__ import annotations

import os

DEFAULT = "passive"

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = DEFAULT
