"""Train on your own data: build a dataset from arrays, save it, open it, train, evaluate.

Replace `make_positions` with your own game records. What manaka needs per position:
  tokens      [2, T] token ids of the pieces seen from each side (-1 = empty slot)
  legal moves a list of distinct move ids (any length >= 1)
  target      the index of the played move in that list
  value       the game result for the side to move (1 win, 0.5 draw, 0 loss)
(docs/design.md §4 describes the folder format; mk.Dataset.open checks every rule.)

Run:  python examples/train_custom_data.py   (under a minute on a laptop CPU)
"""
import os
import tempfile

import numpy as np

import manaka as mk

V, M, T = 500, 800, 12  # token vocabulary, move vocabulary, token slots per side


def make_positions(n, seed):
    """A toy game standing in for real records: every move has a fixed strength, moves whose
    id matches the number of pieces on the board (mod 12) get a bonus, the strongest legal
    move is played, and the side with more pieces wins."""
    strength = np.random.default_rng(1234).standard_normal(M)  # the same for every seed
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, V, (n, 2, T))
    tokens[:, :, 9:][rng.random((n, 2, 3)) < 0.5] = -1          # some empty slots
    counts = rng.integers(5, 60, n)                               # legal moves per position
    offsets = np.concatenate([[0], np.cumsum(counts)])            # the format's legal_offsets
    moves = np.concatenate([rng.choice(M, c, replace=False) for c in counts])
    pieces = (tokens >= 0).sum(axis=2)
    bonus = 2.0 * (moves % 12 == np.repeat(pieces.sum(axis=1) % 12, counts))
    score = strength[moves] + bonus
    target = np.array([np.argmax(score[offsets[i]:offsets[i + 1]]) for i in range(n)])
    value = np.where(pieces[:, 0] > pieces[:, 1], 1.0, np.where(pieces[:, 0] < pieces[:, 1], 0.0, 0.5))
    return dict(tokens=tokens, legal_offsets=offsets, legal_moves=moves, target=target, value=value)


def main():
    train = mk.Dataset.from_arrays(**make_positions(10_000, seed=0), num_tokens=V, num_moves=M)
    test = mk.Dataset.from_arrays(**make_positions(2_000, seed=1), num_tokens=V, num_moves=M)
    with tempfile.TemporaryDirectory() as tmp:
        # Save in the on-disk format and open it memory-mapped, as a large dataset would be.
        train = mk.Dataset.open(train.save(os.path.join(tmp, "train")))
        print(train)
        print(train[0])

        cfg = mk.ModelConfig(num_tokens=V, num_moves=M, tokens_per_side=T, embed_dim=32, orders=3,
                             pair_dim=4, hidden=(128,), head_width=64)
        model = mk.Model(cfg, device="cpu", seed=0)
        report = lambda when, r: print(f"{when}: held-out loss {r['loss']:.3f}, accuracy {r['accuracy']:.3f}")
        report("before", mk.evaluate(model, test))
        loader = mk.Loader(train, batch_size=256, producers=2, seed=0)
        trainer = mk.Trainer(model, lr=3e-3, warmup_steps=20)
        history = mk.fit(model, loader, epochs=3, trainer=trainer, log_every=50,
                         checkpoint=os.path.join(tmp, "run.ckpt"))
        report("after", mk.evaluate(model, test))
        print(history)


if __name__ == "__main__":
    main()
