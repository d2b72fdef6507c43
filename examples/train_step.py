"""Train a small policy/value network on positions labelled by a fixed random "teacher"
network of the same family: the shortest complete use of manaka.Model and manaka.Trainer.

    python examples/train_step.py            # a few seconds on a laptop CPU
"""
import numpy as np

import manaka as mk


def positions(rng, cfg, B, L=24):
    """Random positions: token ids per perspective (-1 = empty slot) and legal-move lists."""
    tokens = rng.integers(0, cfg.num_tokens, (B, 2, cfg.tokens_per_side))
    tokens[rng.random(tokens.shape) < 0.2] = -1
    counts = rng.integers(2, L + 1, B)
    legal = np.full((B, L), -1)
    for b in range(B):
        legal[b, :counts[b]] = rng.choice(cfg.num_moves, counts[b], replace=False)
    return tokens, legal, counts


def labelled(teacher, rng, cfg, B):
    """A Batch whose targets are the teacher's best legal move and its value estimate."""
    tokens, legal, counts = positions(rng, cfg, B)
    unlabelled = mk.Batch(tokens, legal, counts, np.zeros(B, int), np.zeros(B, np.float32))
    logits, value = teacher.forward(unlabelled)
    logits[np.arange(legal.shape[1])[None, :] >= counts[:, None]] = -np.inf
    return mk.Batch(tokens, legal, counts, logits.argmax(axis=1), value)


def main():
    cfg = mk.ModelConfig(num_tokens=64, num_moves=200, tokens_per_side=16, embed_dim=32,
                         orders=3, pair_dim=8, hidden=(128, 128), head_width=64)
    teacher, student = mk.Model(cfg, seed=1), mk.Model(cfg, seed=2)
    print(student)
    rng = np.random.default_rng(0)
    held_out = labelled(teacher, rng, cfg, 1024)
    trainer = mk.Trainer(student, lr=3e-3, warmup_steps=50, schedule="cosine", total_steps=600)
    for step in range(600):
        stats = trainer.step(labelled(teacher, rng, cfg, 256))
        if step % 100 == 0 or step == 599:
            print(stats)  # the floats are read from the step's stats buffer only here
    print("held-out:", student.loss_and_grad(held_out)[0])
    student.save("student.manaka")
    print("saved student.manaka; reloaded:", mk.Model.load("student.manaka").config == cfg)


if __name__ == "__main__":
    main()
