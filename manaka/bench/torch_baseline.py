"""The network of docs/design.md §1 in plain PyTorch eager, gathers written the ordinary way
(materialising [B, S, T, D], [B, S, T (T - 1) / 2, P] and [B, L, W]), as the baseline of
``python -m manaka.bench step``. It loads the SAME parameters as a manaka.Model and runs
on the same batch, so the two losses can be compared.

Only the benchmarks and tests import this module, and only when torch is installed: torch is never a
dependency of manaka.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch
import torch.nn.functional as F


class TorchNet(torch.nn.Module):
    def __init__(self, cfg, state: dict):
        super().__init__()
        self.cfg = cfg
        self.names = list(state)
        self.params = torch.nn.ParameterDict(
            {n.replace(".", "_"): torch.nn.Parameter(torch.from_numpy(np.array(a, np.float32)))
             for n, a in state.items()})
        T = cfg.tokens_per_side
        i, j = np.triu_indices(T, k=1)
        self.register_buffer("pair_i", torch.from_numpy(i))
        self.register_buffer("pair_j", torch.from_numpy(j))

    def p(self, name):
        return self.params[name.replace(".", "_")]

    def forward(self, tokens, legal, counts):
        cfg = self.cfg
        B, S, T = tokens.shape
        present = tokens >= 0
        emb = self.p("embedding")[tokens.clamp(min=0)] * present[..., None]    # [B, S, T, D]
        ps = torch.stack([(emb ** (k + 1)).sum(2) for k in range(cfg.orders)], 2)  # [B, S, K, D]
        ti, tj = tokens[:, :, self.pair_i], tokens[:, :, self.pair_j]
        lo, hi = torch.minimum(ti, tj).long(), torch.maximum(ti, tj).long()
        valid = (ti >= 0) & (tj >= 0)
        rows = (hi * (hi + 1) // 2 + lo).clamp(min=0)
        pair = (self.p("pair_table")[rows] * valid[..., None]).sum(2)           # [B, S, P]
        x = torch.cat([ps.reshape(B, S, -1), pair], 2).reshape(B, -1)
        for i in range(len(cfg.hidden)):
            x = F.relu(F.linear(x, self.p(f"trunk.{i}.weight"), self.p(f"trunk.{i}.bias")))
        q = F.linear(x, self.p("policy.weight"), self.p("policy.bias"))
        mask = torch.arange(legal.shape[1], device=legal.device)[None, :] < counts[:, None]
        moves = self.p("move_table")[legal.clamp(min=0).long()]                 # [B, L, W]
        logits = torch.bmm(moves, q[:, :, None])[:, :, 0].masked_fill(~mask, 0.0)
        z = F.linear(x, self.p("value.weight"), self.p("value.bias"))[:, 0]
        return logits, z, mask

    def loss(self, tokens, legal, counts, target, value, policy_target=None, value_weight=1.0, pair=None):
        logits, z, mask = self(tokens, legal, counts) if pair is None else self(tokens, legal, counts, pair)
        logp = F.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=1)
        if policy_target is None:
            policy_loss = -logp.gather(1, target.long()[:, None]).mean()
        else:
            policy_loss = -(policy_target * logp.masked_fill(~mask, 0.0)).sum(1).mean()
        value_loss = F.binary_cross_entropy_with_logits(z, value)
        return policy_loss + value_weight * value_loss


class DenseTorchNet(TorchNet):
    """The strongest plain-PyTorch form of the same network found here, without manaka:
    PowerSums as one ``embedding_bag`` (sum) over a table of precomputed powers
    [V, K D], PairSums as an ``embedding_bag`` over the pair-table rows of every token pair,
    and the policy logits as one dense GEMM over all M moves ([B, M]) then gathered at the
    legal moves. Empty slots and pairs get per-sample weight 0. Same loss as TorchNet.
    sparse_pairs: the pair table's gradient is a sparse tensor of the rows the batch
    touches (``embedding_bag(sparse=True)``), for ``torch.optim.SparseAdam``."""

    sparse_pairs = False

    def pair_features(self, tokens):
        """PairSums [B, S, P] as one embedding_bag over every token pair's row."""
        B, S, T = tokens.shape
        ti, tj = tokens[:, :, self.pair_i], tokens[:, :, self.pair_j]
        lo, hi = torch.minimum(ti, tj).long(), torch.maximum(ti, tj).long()
        valid = ((ti >= 0) & (tj >= 0)).reshape(B * S, -1)
        rows = (hi * (hi + 1) // 2 + lo).clamp(min=0).reshape(B * S, -1)
        table = self.p("pair_table")
        pair = F.embedding_bag(rows, table, mode="sum", per_sample_weights=valid.to(table.dtype),
                               sparse=self.sparse_pairs)
        return pair.reshape(B, S, -1)

    def forward(self, tokens, legal, counts, pair=None):
        """pair: PairSums computed outside (pair_features), e.g. eagerly where the rest is
        compiled; None: computed here."""
        cfg = self.cfg
        B, S, T = tokens.shape
        present = tokens >= 0
        emb = self.p("embedding")
        powers = torch.cat([emb ** (k + 1) for k in range(cfg.orders)], 1)      # [V, K D]
        ps = F.embedding_bag(tokens.clamp(min=0).reshape(B * S, T).long(), powers, mode="sum",
                             per_sample_weights=present.reshape(B * S, T).to(emb.dtype))
        if pair is None:
            pair = self.pair_features(tokens)
        x = torch.cat([ps.reshape(B, S, -1), pair], 2).reshape(B, -1)
        for i in range(len(cfg.hidden)):
            x = F.relu(F.linear(x, self.p(f"trunk.{i}.weight"), self.p(f"trunk.{i}.bias")))
        q = F.linear(x, self.p("policy.weight"), self.p("policy.bias"))
        mask = torch.arange(legal.shape[1], device=legal.device)[None, :] < counts[:, None]
        every = q @ self.p("move_table").T                                      # [B, M]
        logits = every.gather(1, legal.clamp(min=0).long()).masked_fill(~mask, 0.0)
        z = F.linear(x, self.p("value.weight"), self.p("value.bias"))[:, 0]
        return logits, z, mask


class TorchStep:
    """forward, loss, backward and torch.optim.AdamW (no decay on biases).

    dense: DenseTorchNet instead of TorchNet; fused: torch.optim.AdamW(fused=...) (default:
    on CUDA only). device: "cpu" or "cuda"; compile: wrap the network in torch.compile (the step's forward
    and backward become compiled graphs; on CUDA AdamW is the fused multi-tensor kernel).
    sparse_adam (with dense): the pair table gets a sparse gradient and
    torch.optim.SparseAdam (only the rows the batch touches; no weight decay, as SparseAdam
    has none), every other parameter AdamW as above. Compiled, the pair table's
    embedding_bag runs eagerly and the rest of the loss is compiled (torch 2.13's inductor
    fails on the sparse embedding_bag backward)."""

    def __init__(self, cfg, state, batch, lr=1e-3, weight_decay=0.01, device="cpu", compile=False,
                 dense=False, fused=None, sparse_adam=False):
        """`batch`: one mk.Batch, or a list of them that the steps cycle through in order."""
        if sparse_adam and not dense:
            raise ValueError("TorchStep: sparse_adam needs dense=True (the embedding_bag network)")
        self.device = torch.device(device)
        self.net = (DenseTorchNet if dense else TorchNet)(cfg, state).to(self.device)
        self.net.sparse_pairs = sparse_adam
        sparse = ["pair_table"] if sparse_adam else []
        decay = [self.net.p(n) for n in self.net.names if not n.endswith("bias") and n not in sparse]
        no_decay = [self.net.p(n) for n in self.net.names if n.endswith("bias")]
        if fused is None:  # default: torch's fused AdamW kernel on CUDA, its default on the CPU
            fused = self.device.type == "cuda"
        fused = {"fused": True} if fused else {}
        self.opts = [torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                        {"params": no_decay, "weight_decay": 0.0}], lr=lr, **fused)]
        if sparse_adam:
            self.opts.append(torch.optim.SparseAdam([self.net.p(n) for n in sparse], lr=lr))
        self.opt = self.opts[0]
        self.loss_fn = torch.compile(self.net.loss) if compile else self.net.loss
        if compile and sparse_adam:
            compiled = self.loss_fn
            self.loss_fn = lambda *args: compiled(*args, pair=self.net.pair_features(args[0]))
        batches = batch if isinstance(batch, (list, tuple)) else [batch]
        self.arg_sets = [[None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
                          for a in (b.tokens, b.legal, b.counts, b.target, b.value, b.policy_target)]
                         for b in batches]
        self.args = self.arg_sets[0]
        self._next = itertools.cycle(self.arg_sets)

    def loss(self) -> float:
        """The loss on the first batch (the same one every time)."""
        with torch.no_grad():
            return float(self.net.loss(*self.args))

    def step(self):
        """One step; returns the loss as a tensor, so nothing is read back from the device
        (float() it to read it; synchronise to time it)."""
        for opt in self.opts:
            opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(*next(self._next))
        loss.backward()
        for opt in self.opts:
            opt.step()
        return loss.detach()
