"""The batch slots' bookkeeping (csrc/core/staging_slots.h), driven alone against a timing model of
two in-order streams: a copy never writes a slot while a step that read it may still run,
a step never starts before its own copy, and the copy of batch n never waits for step
n - 1 (the overlap). The emulated GPU is synchronous, so only this test can see a reuse
bug; the same simulation with a plan that forgets to wait must fail it."""
import ctypes
import random

import pytest

import c_snippet

SLOTS = 2


@pytest.fixture(scope="module")
def slots(tmp_path_factory):
    so = c_snippet.build(tmp_path_factory, "slots", '#include "core/staging_slots.h"\n'
                         "static mk_staging_slots s;\n"
                         "int count(void) { return MK_STAGING_SLOTS; }\n"
                         "void reset(void) { mk_staging_slots_reset(&s); s.next = 0; }\n"
                         "void sync_reset(void) { mk_staging_slots_reset(&s); }\n"
                         "int peek(void) { return mk_staging_slots_peek(&s); }\n"
                         "void take(int *out) { mk_staging_slot_plan p = mk_staging_slots_take(&s);"
                         " out[0] = p.slot; out[1] = p.wait_done; out[2] = p.sync_first; }\n"
                         "void finish(int slot) { mk_staging_slots_finish(&s, slot); }\n",
                         "the batch slots' test library")
    so.take.argtypes = [ctypes.POINTER(ctypes.c_int)]
    so.finish.argtypes = [ctypes.c_int]
    assert so.count() == SLOTS
    return so


def real_plan(so):
    def take():
        out = (ctypes.c_int * 3)()
        so.take(out)
        return out[0], bool(out[1]), bool(out[2])
    return take


def simulate(take, finish, sync_reset, steps=3000, seed=0):
    """Queues `steps` batches as staging.c does and returns the list of violations.

    Times: the host queues work at `host`; each stream runs its work in order; an event
    completes when the work queued on its stream before the record has; a wait makes the
    waiting stream's next work start after it. Durations are random, so copies and steps
    of any relative length occur; some batches are device batches (no copy), some grow
    the slots (both streams synchronised first), some steps fail midway (end still runs)."""
    rng = random.Random(seed)
    host = copy_end = step_end = 0.0
    done_at = [0.0] * SLOTS          # completion of done[slot]'s last record
    done_step = [-1] * SLOTS         # the step that record follows
    readers = [[] for _ in range(SLOTS)]  # (start, end) of the steps that read each slot
    problems, grew, waited = [], 0, 0
    for n in range(steps):
        if rng.random() < 0.03:  # a larger batch: both streams drained, slots start afresh
            host = max(host, copy_end, step_end)
            readers = [[] for _ in range(SLOTS)]
            sync_reset()
            grew += 1
        slot, wait_done, sync_first = take()
        if sync_first:
            host = max(host, copy_end, step_end)
        device_batch = rng.random() < 0.3
        if not device_batch:
            start = max(host, copy_end, done_at[slot] if wait_done else 0.0)
            if wait_done:
                waited += 1
                if done_step[slot] >= n - 1:
                    problems.append(f"copy {n} waits for step {done_step[slot]}: no overlap with step n - 1")
            copy_end = start + rng.choice([0.1, 1.0, 5.0]) * rng.random()
            for s0, s1 in readers[slot]:
                if s1 > start:
                    problems.append(f"copy {n} into slot {slot} at {start:.3f} while a step reads it until {s1:.3f}")
            readers[slot] = [r for r in readers[slot] if r[1] > start]  # finished ones can go
        copied_at = copy_end  # copied[slot] records everything queued on the copy stream
        begin = max(step_end, copied_at, host)
        if not device_batch and begin < copy_end:
            problems.append(f"step {n} starts before its copy ends")
        step_end = begin + (0.0 if rng.random() < 0.05 else rng.choice([0.1, 1.0, 5.0]) * rng.random())
        readers[slot].append((begin, step_end))
        done_at[slot], done_step[slot] = step_end, n  # end(): record done[slot] behind the step
        finish(slot)
        host += 0.2 * rng.random()  # the host runs ahead: nothing here waits for the device
    return problems, grew, waited


def test_no_copy_overwrites_a_slot_in_use_and_copies_overlap_the_previous_step(slots):
    slots.reset()
    problems, grew, waited = simulate(real_plan(slots), slots.finish, slots.sync_reset)
    assert problems == []
    assert grew > 50 and waited > 1000  # growth in the middle, and the wait path, both ran


def test_the_simulation_catches_a_plan_that_does_not_wait(slots):
    """A plan that never waits for the slot's last step (a single-stream assumption) must
    be caught: otherwise the test above could not fail."""
    slots.reset()
    take = real_plan(slots)

    def careless():
        slot, _, sync_first = take()
        return slot, False, sync_first

    problems, _, _ = simulate(careless, slots.finish, slots.sync_reset)
    assert any("while a step reads it" in p for p in problems)


def test_slots_alternate_and_a_missing_finish_forces_a_sync(slots):
    slots.reset()
    take = real_plan(slots)
    assert slots.peek() == 0
    assert take() == (0, False, False)  # fresh: nothing to wait for
    slots.finish(0)
    assert slots.peek() == 1
    assert take() == (1, False, False)
    slots.finish(1)
    assert take() == (0, True, False)   # step n - 2 read slot 0: wait for its done event
    # slot 0 taken, never finished: its reader has no done record, so the next time it
    # comes round the plan asks to synchronise both streams instead of waiting for an event
    assert take() == (1, True, False)
    slots.finish(1)
    assert take() == (0, False, True)
    slots.finish(0)
    slots.sync_reset()  # after a drain nothing is waited for
    assert take() == (1, False, False)
