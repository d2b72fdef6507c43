"""Worker processes of tests/api/test_trainer_distributed.py (spawned: a module of their own so
that the child processes can import the function they run)."""
import datetime
import os
import sys
import time
import traceback

import numpy as np

import manaka as mk
import model_cases as cases

STEPS, B, L, LR = 3, 4, 8, 0.02


def exit_now(code: int) -> None:
    """Ends a worker once its results are written, without the interpreter's teardown: after
    a gloo run, that teardown aborts now and then ("terminate called without an active
    exception", in C++ destructors after the last Python frame), which would fail the test
    on its exit code for nothing the test checks (manaka.train's processes end the same way)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail(out: str, rank: int) -> None:
    """Writes the current exception to error<rank>.txt, where the test reads it, and ends."""
    with open(os.path.join(out, f"error{rank}.txt"), "w") as f:
        f.write(traceback.format_exc())
    os._exit(1)


def config():
    # with a move-pair table (the shogi recipe has one), exchanged with the other dense
    # parameters. C = num_moves gives every move its own class: with fewer, a class can hold
    # all of a position's legal moves, whose softmax gradients sum to 0, and the zero-started
    # entry's first Adam step (about lr whatever the gradient) would take its sign from the
    # rounding of that sum, which ranks and one process order differently
    return cases.config(hidden=(9,), num_tokens=23, T=7, pair_dim=3, move_pairs=17)


def global_batch(world: int, step: int, seed: int) -> mk.Batch:
    """The concatenated batch of all ranks at `step`: W * B rows."""
    return cases.batch(config(), B=world * B, L=L, seed=seed + step, empty_fraction=0.3)


def shard(batch: mk.Batch, rank: int) -> mk.Batch:
    return shard_rows(batch, rank, B)


def shard_rows(batch: mk.Batch, rank: int, size: int) -> mk.Batch:
    """Rank `rank`'s rows of a concatenated batch, `size` of them."""
    rows = slice(rank * size, (rank + 1) * size)
    return mk.Batch(batch.tokens[rows], batch.legal[rows], batch.counts[rows], batch.target[rows],
                    batch.value[rows], None if batch.policy_target is None else batch.policy_target[rows])


def one_process(world: int, pair_update: str, seed: int):
    """The reference: one process, no process group, on the concatenated batches."""
    model = mk.Model(config(), seed=3)
    trainer = mk.Trainer(model, lr=LR, pair_update=pair_update)
    losses = [trainer.step(global_batch(world, k, seed)).loss for k in range(STEPS)]
    return model.state_dict(), losses


def run(rank: int, world: int, rendezvous: str, out: str, updates, seed: int, kill: int = -1,
        how: str = "exit", model_seed: int = 3, timeout: float = 20):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout))
        for update in updates:
            model = mk.Model(config(), seed=model_seed if rank == world - 1 else 3)
            trainer = mk.Trainer(model, lr=LR, pair_update=update, process_group=dist.group.WORLD)
            losses, sent = [], []
            for k in range(STEPS):
                batch = shard(global_batch(world, k, seed), rank)
                if k == 1 and rank == kill:
                    trainer._core.backward(mk.Batch(batch.tokens, batch.legal, batch.counts, batch.target,
                                                    batch.value))
                    if how == "stall":  # alive but silent: the others must time out
                        time.sleep(3600)
                    os._exit(3)  # dies mid-step, between its backward and the exchange
                stats = trainer.step(batch)
                losses.append(stats.loss)
                sent.append(trainer.last_exchange["sent"])
            np.savez(os.path.join(out, f"{update}-rank{rank}.npz"), losses=np.array(losses), sent=np.array(sent),
                     **model.state_dict())
        dist.destroy_process_group()
        exit_now(0)
    except Exception:
        fail(out, rank)


# ------------------------------------------------------------------ mk.fit on every rank

FIT = dict(num_tokens=40, num_moves=60, tokens_per_side=6, orders=2)
FIT_B, FIT_SEED = 8, 5  # positions per rank per step, the loader's seed


def fit_dataset():
    from types import SimpleNamespace
    return mk.Dataset.synthetic(300, SimpleNamespace(**FIT), seed=9)


def fit_model():
    return mk.Model(mk.ModelConfig(**FIT, embed_dim=4, pair_dim=3, hidden=(8,), head_width=6), seed=2)


def fit_loader(ds, world: int, rank: int = 0):
    return mk.Loader(ds, batch_size=FIT_B * 2 // world, seed=FIT_SEED, producers=1, drop_last=True, rank=rank,
                     world_size=world)


def fit_run(rank: int, world: int, rendezvous: str, out: str, steps: int, checkpoint: str):
    """fit on rank `rank`: its shard, a data-parallel trainer, rank 0's checkpoint."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=30))
        model = fit_model()
        trainer = mk.Trainer(model, lr=LR, pair_update="sparse", process_group=dist.group.WORLD)
        lines = []
        history = mk.fit(model, fit_loader(fit_dataset(), world, rank), steps=steps, trainer=trainer,
                         checkpoint=checkpoint, log=lines.append, log_every=1, progress=False)
        np.savez(os.path.join(out, f"fit-rank{rank}.npz"), lines=np.array(len(lines)),
                 loss=history["loss"], **model.state_dict())
        dist.destroy_process_group()
        exit_now(0)
    except Exception:
        fail(out, rank)
