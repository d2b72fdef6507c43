"""A small dlshogi-style ResNet in plain PyTorch, the reference of ``python -m manaka.bench
strength``: cshogi's dlshogi input features (``cshogi.dlshogi.make_input_features``), a
3x3 convolution stem, residual blocks, a 27x81 policy head (dlshogi's move labels, a 1x1
convolution to 27 planes) read at the position's legal labels (the softmax is over the legal
moves, as manaka's), and a value head (1x1 convolution, a hidden layer, one logit).

Only the benchmark and its test import this module (torch and cshogi are benchmark
dependencies, never manaka's).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from cshogi import Board
from cshogi.dlshogi import FEATURES1_NUM, FEATURES2_NUM, make_input_features

PLANES = FEATURES1_NUM + FEATURES2_NUM
NUM_LABELS = 27 * 81


class Block(torch.nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.c1 = torch.nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(ch)
        self.c2 = torch.nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(ch)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(x + self.b2(self.c2(y)))


class ResNet(torch.nn.Module):
    def __init__(self, blocks: int = 3, channels: int = 64, value_hidden: int = 128):
        super().__init__()
        self.stem = torch.nn.Conv2d(PLANES, channels, 3, padding=1, bias=False)
        self.stem_bn = torch.nn.BatchNorm2d(channels)
        self.blocks = torch.nn.Sequential(*[Block(channels) for _ in range(blocks)])
        self.policy = torch.nn.Conv2d(channels, 27, 1)  # label = direction * 81 + square
        self.value_conv = torch.nn.Conv2d(channels, 1, 1)
        self.value_fc1 = torch.nn.Linear(81, value_hidden)
        self.value_fc2 = torch.nn.Linear(value_hidden, 1)

    def forward(self, x):
        h = self.blocks(F.relu(self.stem_bn(self.stem(x))))
        policy = self.policy(h).reshape(len(x), NUM_LABELS)  # [B, 27*81], row-major = label order
        v = F.relu(self.value_conv(h)).reshape(len(x), 81)
        return policy, self.value_fc2(F.relu(self.value_fc1(v)))[:, 0]


def features(records: np.ndarray) -> np.ndarray:
    """dlshogi input planes [N, PLANES, 9, 9] float32 of HCPE records (uint8 [N, 38])."""
    n = len(records)
    f1 = np.zeros((n, FEATURES1_NUM, 9, 9), np.float32)
    f2 = np.zeros((n, FEATURES2_NUM, 9, 9), np.float32)
    board = Board()
    for i in range(n):
        board.set_hcp(np.ascontiguousarray(records[i, :32]))
        make_input_features(board, f1[i], f2[i])
    return np.concatenate([f1, f2], axis=1)


def legal_logits(policy: torch.Tensor, legal: np.ndarray, counts: np.ndarray) -> torch.Tensor:
    """The policy read at each position's legal labels, [B, L], -inf at padded slots."""
    idx = torch.from_numpy(np.where(legal >= 0, legal, 0).astype(np.int64))
    out = policy.gather(1, idx)
    mask = torch.from_numpy(np.arange(legal.shape[1])[None, :] < counts[:, None])
    return out.masked_fill(~mask, float("-inf"))


class ResNetRun:
    """One ResNet and its AdamW, trained by :meth:`step` on rows of a :class:`PositionTable`."""

    def __init__(self, blocks: int = 3, channels: int = 64, lr: float = 1e-3, weight_decay: float = 1e-4,
                 seed: int = 0):
        torch.manual_seed(seed)
        self.net = ResNet(blocks, channels)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=lr, weight_decay=weight_decay)

    def step(self, x: np.ndarray, legal, counts, target, value) -> float:
        self.net.train()
        policy, z = self.net(torch.from_numpy(x))
        logits = legal_logits(policy, legal, counts)
        loss = (F.cross_entropy(logits, torch.from_numpy(target.astype(np.int64)))
                + F.binary_cross_entropy_with_logits(z, torch.from_numpy(value.astype(np.float32))))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    @torch.no_grad()
    def predict(self, x: np.ndarray, legal, counts):
        """(logits [B, L] float64 with -inf padding, value probabilities [B])."""
        self.net.eval()
        policy, z = self.net(torch.from_numpy(x))
        return legal_logits(policy, legal, counts).double().numpy(), torch.sigmoid(z).double().numpy()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.net.parameters())
