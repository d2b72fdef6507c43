"""Plain NumPy references for every op of docs/design.md §1: float64, written for clarity,
independent of the C code. These are the test oracles; keep ONE reference per op here."""
import numpy as np


def pair_index(a, b):
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    return hi * (hi + 1) // 2 + lo


def legal_mask(indices, counts):
    B, L = indices.shape
    if counts is None:
        return np.ones((B, L), bool)
    return np.arange(L)[None, :] < np.asarray(counts)[:, None]


def gather_dot(hidden, table, indices, counts=None):
    hidden, table = np.float64(hidden), np.float64(table)
    mask = legal_mask(indices, counts)
    safe = np.where(mask, indices, 0)
    logits = np.einsum("bw,blw->bl", hidden, table[safe])
    return np.where(mask, logits, 0.0)


def gather_dot_backward(grad, hidden, table, indices, counts=None):
    hidden, table = np.float64(hidden), np.float64(table)
    mask = legal_mask(indices, counts)
    g = np.where(mask, np.float64(grad), 0.0)
    safe = np.where(mask, indices, 0)
    grad_hidden = np.einsum("bl,blw->bw", g, table[safe])
    grad_table = np.zeros_like(table)
    b, l = np.nonzero(mask)
    np.add.at(grad_table, indices[b, l], g[b, l][:, None] * hidden[b])
    return grad_hidden, grad_table


def power_sums(emb, tokens, orders):
    emb = np.float64(emb)
    present = tokens >= 0
    gathered = np.where(present[..., None], emb[np.where(present, tokens, 0)], 0.0)  # [B,S,T,D]
    return np.stack([(gathered ** (k + 1)).sum(axis=2) for k in range(orders)], axis=2)


def power_sums_backward(grad, emb, tokens):
    emb, grad = np.float64(emb), np.float64(grad)
    K = grad.shape[2]
    grad_emb = np.zeros_like(emb)
    for b, s, t in zip(*np.nonzero(tokens >= 0)):
        v = tokens[b, s, t]
        grad_emb[v] += sum(grad[b, s, k] * (k + 1) * emb[v] ** k for k in range(K))
    return grad_emb


def pair_sums(pair_table, tokens):
    pair_table = np.float64(pair_table)
    B, S, T = tokens.shape
    out = np.zeros((B, S, pair_table.shape[1]))
    i, j = np.triu_indices(T, k=1)
    for b in range(B):
        for s in range(S):
            ti, tj = tokens[b, s, i], tokens[b, s, j]
            keep = (ti >= 0) & (tj >= 0)
            out[b, s] = pair_table[pair_index(ti[keep], tj[keep])].sum(axis=0)
    return out


def pair_sums_backward(grad, tokens, num_pairs):
    grad = np.float64(grad)
    B, S, T = tokens.shape
    out = np.zeros((num_pairs, grad.shape[2]))
    i, j = np.triu_indices(T, k=1)
    for b in range(B):
        for s in range(S):
            ti, tj = tokens[b, s, i], tokens[b, s, j]
            keep = (ti >= 0) & (tj >= 0)
            np.add.at(out, pair_index(ti[keep], tj[keep]), grad[b, s])
    return out


def move_pair_sums(table, tokens, legal, counts=None):
    """logits [B, L]: for each legal slot, the sum over the position's tokens (tokens [B, T],
    -1 empty) of table[token, move % C]; 0 at padded slots."""
    table = np.float64(table)
    C = table.shape[1]
    mask = legal_mask(legal, counts)
    out = np.zeros(legal.shape)
    for b in range(legal.shape[0]):
        for t in tokens[b]:
            if t >= 0:
                out[b] += np.where(mask[b], table[t, np.where(mask[b], legal[b], 0) % C], 0.0)
    return out


def move_pair_sums_backward(grad, tokens, legal, counts, V, C):
    """grad_table [V, C] of move_pair_sums for the upstream grad [B, L]."""
    mask = legal_mask(legal, counts)
    out = np.zeros((V, C))
    for b in range(legal.shape[0]):
        for t in tokens[b]:
            if t >= 0:
                np.add.at(out[t], legal[b][mask[b]] % C, np.float64(grad[b][mask[b]]))
    return out


def relative_index(v, c, C, W, H, K):
    """ridx(v, c) of the move-pair table's relative part (csrc/core/backend_ops.def), or -1
    where the token v is not a board token (v >= K W H). Written from the definition:
    the token's kind and (x, y), the class's kind and (x, y), their offset."""
    S = W * H
    if v < 0 or v >= K * S:
        return -1
    kv, (xv, yv) = v // S, divmod(v % S, H)
    kc, (xc, yc) = c // S, divmod(c % S, H)
    return ((kv * (2 * W - 1) + xv - xc + W - 1) * (2 * H - 1) + yv - yc + H - 1) * (C // S) + kc


def move_pair_relative_sums(relative, tokens, legal, counts, C, W, H, K):
    """logits [B, L]: for each legal slot, the sum over the position's board tokens
    (tokens [B, T]) of relative[ridx(token, move % C)]; 0 at padded slots."""
    flat = np.float64(relative).reshape(-1)
    mask = legal_mask(legal, counts)
    out = np.zeros(legal.shape)
    for b in range(legal.shape[0]):
        for l in np.flatnonzero(mask[b]):
            for t in tokens[b]:
                r = relative_index(int(t), int(legal[b, l]) % C, C, W, H, K)
                if r >= 0:
                    out[b, l] += flat[r]
    return out


def move_hidden_units(relative, class_rows, tokens, legal, counts, C, W, H, K):
    """MoveHidden's units before the ReLU, pre [B, L, D]: for each legal slot, class_rows
    at the move's class plus, over the position's board tokens (tokens [B, T]),
    relative[ridx(token, class)]; 0 at padded slots. Written from the definition."""
    rel, cls = np.float64(relative), np.float64(class_rows)
    mask = legal_mask(legal, counts)
    out = np.zeros(legal.shape + (cls.shape[1],))
    for b in range(legal.shape[0]):
        for l in np.flatnonzero(mask[b]):
            c = int(legal[b, l]) % C
            out[b, l] = cls[c]
            for t in tokens[b]:
                r = relative_index(int(t), c, C, W, H, K)
                if r >= 0:
                    out[b, l] += rel[r]
    return out


def move_hidden(relative, class_rows, out, tokens, legal, counts, C, W, H, K):
    """(logits [B, L] to add, pre [B, L, D]): out . ReLU(pre) at each legal slot, 0 at padded ones;
    out [D] (one readout) or [B, D] (a readout per position, the gated one: 2-d means that)."""
    pre = move_hidden_units(relative, class_rows, tokens, legal, counts, C, W, H, K)
    o = np.float64(out).reshape(-1, pre.shape[2])                        # [1, D] or [B, D]
    add = (np.maximum(pre, 0.0) * o[:, None, :]).sum(axis=2)
    return np.where(legal_mask(legal, counts), add, 0.0), pre


def move_hidden_backward(grad, pre, out, tokens, legal, counts, C, W, H, K, rows):
    """(grad_relative [rows, D], grad_class [C, D], grad_out [D], or [B, D] for a readout per
    position, out [B, D]) for the upstream grad [B, L] (padded slots ignored), pre from move_hidden."""
    mask = legal_mask(legal, counts)
    G = np.where(mask, np.float64(grad), 0.0)
    on = np.where(mask[:, :, None], pre > 0, False)
    D = pre.shape[2]
    o = np.float64(out).reshape(-1, D)
    g = np.where(on, G[:, :, None] * o[:, None, :], 0.0)  # [B, L, D]
    per_unit = G[:, :, None] * np.maximum(np.where(mask[:, :, None], pre, 0.0), 0.0)
    grad_out = per_unit.sum(axis=1) if np.ndim(out) == 2 else per_unit.sum(axis=(0, 1))
    grad_class = np.zeros((C, D))
    grad_relative = np.zeros((rows, D))
    for b in range(legal.shape[0]):
        for l in np.flatnonzero(mask[b]):
            c = int(legal[b, l]) % C
            grad_class[c] += g[b, l]
            for t in tokens[b]:
                r = relative_index(int(t), c, C, W, H, K)
                if r >= 0:
                    grad_relative[r] += g[b, l]
    return grad_relative, grad_class, grad_out


def move_pair_relative_backward(grad_table, C, W, H, K):
    """grad_relative [K (2W-1) (2H-1), C / (W H)]: grad_table [V, C] summed over the pairs
    (v, c) of each relative entry."""
    S = W * H
    out = np.zeros(K * (2 * W - 1) * (2 * H - 1) * (C // S))
    g = np.float64(grad_table)
    for v in range(min(K * S, g.shape[0])):
        for c in range(C):
            out[relative_index(v, c, C, W, H, K)] += g[v, c]
    return out.reshape(-1, C // S)


def move_shared_add(cls, grp, legal, counts, C):
    """The shared move embeddings' term [B, L] (backend_ops.def move_shared_add), float64:
    cls[b, m % C] + grp[b, m // C] for each legal move m (l < counts[b]), 0 at padded slots."""
    legal = np.asarray(legal, np.int64)
    B, L = legal.shape
    used = np.arange(L)[None, :] < np.asarray(counts)[:, None]
    m = np.where(used, legal, 0)
    rows = np.arange(B)[:, None]
    out = np.float64(cls)[rows, m % C] + np.float64(grp)[rows, m // C]
    return np.where(used, out, 0.0)


def move_kind_split(legal, counts, R, C):
    """(moves, kind_rows) [B, L] int32 (backend_ops.def move_kind_split): each label x of a
    used slot is move x % R of the move table and row x % C + C (x // R) of the kind table;
    0 at padded slots."""
    legal = np.asarray(legal, np.int64)
    B, L = legal.shape
    used = np.arange(L)[None, :] < np.asarray(counts)[:, None]
    x = np.where(used, legal, 0)
    return (x % R).astype(np.int32), (x % C + C * (x // R)).astype(np.int32)


def move_shared_backward(dlogits, legal, counts, C, G):
    """(dcls [B, C], dgrp [B, G]), float64: each legal move's upstream gradient summed into
    its class's and its group's entry of its position (backend_ops.def move_shared_backward)."""
    legal = np.asarray(legal, np.int64)
    B, L = legal.shape
    dcls, dgrp = np.zeros((B, C)), np.zeros((B, G))
    for b in range(B):
        for l in range(int(counts[b])):
            m = int(legal[b, l])
            dcls[b, m % C] += dlogits[b, l]
            dgrp[b, m // C] += dlogits[b, l]
    return dcls, dgrp
