"""A tiny deterministic stand-in for Model/Trainer (docs/design.md §2 API) so mk.fit's loop,
logging and checkpoint/resume are tested on their own; the real model is tested too
where it exists (tests/api/test_fit.py)."""
import numpy as np


class FakeModel:
    def __init__(self, seed=0):
        self.params = {"w": np.random.default_rng(seed).standard_normal(16).astype(np.float32),
                       "w.bias": np.zeros(1, np.float32)}

    def state_dict(self):
        return {k: v.copy() for k, v in self.params.items()}

    def load_state_dict(self, state):
        for k in self.params:
            self.params[k][...] = state[k]


class FakeStats:
    def __init__(self, loss, accuracy, lr):
        self._loss, self.accuracy, self.lr = loss, accuracy, lr
        self.policy_loss, self.value_loss = loss, 0.0
        self.reads = 0

    @property
    def loss(self):
        self.reads += 1
        return self._loss


class FakeTrainer:
    """Adam-like updates whose result depends on every batch and on the order of batches."""

    def __init__(self, model, lr=1e-2, total_steps=None):
        self.model, self.lr, self.t = model, lr, 0
        self.m = np.zeros(16, np.float32)
        self.seen = []
        self.stats = []

    def step(self, batch):
        w = self.model.params["w"]
        legal = batch.legal[batch.legal >= 0]
        g = (np.bincount(legal % 16, minlength=16).astype(np.float32) / len(legal)
             + batch.value.mean() * np.float32(0.1) + (batch.tokens[:, 0, 0] % 7).mean() * np.float32(0.01))
        self.t += 1
        self.m = np.float32(0.9) * self.m + np.float32(0.1) * g
        w -= np.float32(self.lr) * (self.m + np.float32(0.01) * w)
        self.model.params["w.bias"] += np.float32(self.lr) * batch.target.mean()
        self.seen.append(int(batch.tokens[0, 0, 0]))
        stats = FakeStats(float(np.abs(w).sum()), float(self.t % 10) / 10, self.lr)
        self.stats.append(stats)
        return stats

    def state_dict(self):
        return {"t": self.t, "m": self.m.copy()}

    def load_state_dict(self, state):
        self.t, self.m = state["t"], state["m"].copy()
