"""Runs one function in `world` spawned processes (the ranks of a torch.distributed group)
and waits for them with a time limit, so that a hang fails the test instead of blocking the
suite. A rank told to stall (how == "stall") never ends by itself and is not waited for."""
import multiprocessing
import time


def run(target, args_of_rank, world, limit_s, kill=-1, how="exit"):
    """Exit codes of the ranks, rank r running target(*args_of_rank(r)); AssertionError
    naming the ranks still running after `limit_s` seconds (they are killed)."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=args_of_rank(r)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + limit_s
    for r, p in enumerate(procs):
        if not (how == "stall" and r == kill):
            p.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive() and not (how == "stall" and r == kill)]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert not hung, f"ranks {hung} still running after {limit_s} s"
    return [p.exitcode for p in procs]
