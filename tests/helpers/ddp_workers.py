"""Worker processes of tests/torch/test_torch_distributed.py (spawned: a module of their own so
that the child processes can import the function they run)."""
import datetime
import os
import sys
import time
import traceback

import numpy as np
import torch
import torch.distributed as dist

import manaka.torch as mkt
import model_cases as cases
from manaka.torch import distributed as mktd

STEPS, B, L = 3, 4, 8



LR = 0.02  # every optimizer of the workers and of the one-process reference

def config(relative: bool = False, move_hidden: int = 0):
    # with a move-pair table (the shogi recipe has one), exchanged with the other dense
    # parameters. C = num_moves gives every move its own class: with fewer, a class can hold
    # all of a position's legal moves, whose softmax gradients sum to 0, and the zero-started
    # entry's first Adam step (about lr whatever the gradient) would take its sign from the
    # rounding of that sum, which ranks and one process order differently. `relative` adds
    # the table's relative part: 18 moves, a 3 x 3 board of 2 token kinds (18 board tokens,
    # 5 hand tokens) and 2 move kinds, [2 5 5, 2]; `move_hidden` MoveHidden's units over it
    # (its parameters dense, through DDP)
    if relative:
        return cases.config(hidden=(9,), num_tokens=23, num_moves=18, T=7, pair_dim=3, move_pairs=18,
                            board=(3, 3, 2), move_hidden=move_hidden)
    return cases.config(hidden=(9,), num_tokens=23, T=7, pair_dim=3, move_pairs=17)


def global_batch(world: int, step: int, seed: int, relative: bool = False, move_hidden: int = 0):
    """The concatenated batch of all ranks at `step`: a dict of tensors, W * B rows."""
    return mkt.batch_tensors(cases.batch(config(relative, move_hidden), B=world * B, L=L, seed=seed + step,
                                         empty_fraction=0.3))


def optimizers(net, sparse: bool):
    if sparse:
        return [torch.optim.SparseAdam([net.pair_table], lr=LR),
                torch.optim.AdamW(mktd.dense_parameters(net), lr=LR)]
    return [torch.optim.AdamW(mkt.param_groups(net, 0.01), lr=LR)]


def step(model, net, opts, tensors, sparse: bool, stats=None):
    loss = model(**tensors)
    for o in opts:
        o.zero_grad(set_to_none=True)
    loss.backward()
    if sparse:
        mktd.all_reduce_pair_grad(net, stats=stats)
    for o in opts:
        o.step()


def one_process(world: int, sparse: bool, seed: int, relative: bool = False, move_hidden: int = 0):
    """The reference: one process on the concatenated batches."""
    net = mkt.Network(config(relative, move_hidden), seed=3, sparse_pair_grad=sparse)
    model = mktd.LossModule(net)
    opts = optimizers(net, sparse)
    for k in range(STEPS):
        loss = model(**global_batch(world, k, seed, relative, move_hidden))
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in opts:
            o.step()
    return {n: p.detach().clone() for n, p in net.named_parameters()}


def run(rank: int, world: int, rendezvous: str, out: str, sparse: bool, seed: int, kill: int = -1,
        how: str = "exit", relative: bool = False, move_hidden: int = 0):
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=20))
        net = mkt.Network(config(relative, move_hidden), seed=3, sparse_pair_grad=sparse)
        model = mktd.data_parallel(net)
        if relative:  # constants of the config: not broadcast by DDP before every forward
            assert not any(b is net.relative_token_part or b is net.relative_class_part
                           for b in model.modules_buffers)
        opts = optimizers(net, sparse)
        for k in range(STEPS):
            tensors = {n: None if t is None else t[rank * B:(rank + 1) * B]
                       for n, t in global_batch(world, k, seed, relative, move_hidden).items()}
            if k == 1 and rank == kill:
                model(**tensors)
                if how == "stall":  # alive but silent: the others must time out
                    time.sleep(3600)
                os._exit(3)  # dies mid-step, between its forward and its backward
            stats = {}
            step(model, net, opts, tensors, sparse, stats)
        torch.save({n: p.detach().clone() for n, p in net.named_parameters()}, os.path.join(out, f"rank{rank}.pt"))
        dist.destroy_process_group()
    except Exception:
        with open(os.path.join(out, f"error{rank}.txt"), "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)
    # Without the interpreter's teardown: after a gloo run it aborts now and then ("terminate
    # called without an active exception", in C++ destructors after the last Python frame),
    # which failed the test on its exit code (-6) for nothing the test checks.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

