"""Does a RELATIVE pair table help manaka's value head generalise? A probe, not part of manaka.

The question: on held-out engine games manaka's value head (BCE against the game result
0.5445) trails a small dlshogi-style ResNet (0.5254). manaka's trunk sees a position as
two bags of tokens (docs/shogi.md, "The encoding") and its only interaction features are
PairSums over an ABSOLUTE pair table, one row per unordered pair of token ids (2.75 M
rows). The hypothesis: that table memorises (few hits per row at 134 k positions) and has
none of the geometry a convolution shares across squares, while a RELATIVE table indexed
by (kind_a, kind_b, dx, dy) for pairs of board pieces (28·28·17·17 = 226,576 rows) shares
its weights over the board and should generalise from little data.

What it does: value-only PyTorch models (CPU, one thread) train on the engine's evaluation
of the training file, target sigmoid(eval / 561) (manaka's `value='eval'`), and are
measured every ~50 k positions seen on the held-out file against the game RESULT (1 / 0 /
0.5 for the side to move): BCE, value accuracy on decisive positions, and also BCE against
the held-out positions' own sigmoid(eval / 561) (a lower-noise second view). The tokens and
targets come from manaka itself (`manaka.shogi.open_hcpe(...).to_dataset()`), so the
encoding is exactly manaka's. Square convention (checked against cshogi): in each
perspective's frame s = 9·(file − 1) + (rank − 1), i.e. s // 9 = file − 1, s % 9 = rank − 1.

The arms (tables are shared by the two perspectives, as in manaka; each perspective's
features are concatenated, then Linear 512 + ReLU, then Linear 1 = the value logit):

    A        absolute: PowerSums (embedding 2,344 x 32, sums of e^1..e^4 over the tokens)
             + absolute PairSums (pair_index(a, b) = hi(hi+1)/2 + lo, rows of width 4);
             an approximation of manaka's value path at embed 32, pair width 4.
    B4, B16  A + relative PairSums over board-token pairs, width 4 or 16; row
             ((kind_a·28 + kind_b)·17 + dx + 8)·17 + dy + 8 with kind = token // 81 (0..27,
             c·14 + k), the pair ordered lower token id first, dx = file_b − file_a,
             dy = rank_b − rank_a (in the perspective's frame).
    C4, C16  PowerSums + relative PairSums only (no absolute table).
    D        A + king-relative token bags: each board piece as (kind, dx, dy) from its own
             king and from the other king (28·17·17 rows each, width 32, sums).
    BD16     B16 + the king-relative bags of D.
    M        PowerSums only (no pairs): how much any pair table adds.

Training: batch 512, AdamW lr 1e-3 (constant), weight decay 0.01 on everything but biases
(manaka's rule), manaka's initialisation scales (docs/design.md §1: uniform, embedding
σ = 1/√40, pair tables σ = 1/√780, trunk He, readout 1/√512). The same seed gives the same
data order for every arm. The pair indices are precomputed once with NumPy (int32, chunked)
and kept in memory.

The material floor: logistic fits on the training set (to the training games' results) of
(a) a fixed-value material difference (P1 L3 N4 S5 G6 B8 R10, +P/+L/+N/+S 6, +B 10,
+R 12), (b) per-kind count differences (14 board kinds + 7 hand kinds, own − other).

Run (from the repository root; torch CPU wheel; ~2-4 min per arm at 600 k positions):

    OMP_NUM_THREADS=1 nice -n 10 python bench/value_probe.py --arms A,B4,B16,C4,D \\
        --seed 0 --positions 600000 --out /tmp/value_probe
    python bench/value_probe.py --report /tmp/value_probe      # tables + game bootstrap

Each arm writes OUT/<arm>-s<seed>.json (the curve) and .npz (held-out predictions at each
eval point, for a paired bootstrap over held-out games). Result:
bench/results/value-probe-134k.md.
"""
import argparse
import glob
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import manaka.shogi as shogi  # noqa: E402

TRAIN, HELD = "/work/exp/t-now.hcpe", "/work/exp/h0.hcpe"
V, T, BOARD = 2344, 40, 2268
NPAIR_ABS = V * (V + 1) // 2                     # 2,748,340 rows
NKIND = 28
NREL = NKIND * NKIND * 17 * 17                   # 226,576 rows
NKREL = NKIND * 17 * 17                          # 8,092 rows
I_PAIR, J_PAIR = np.triu_indices(T, 1)           # 780 slot pairs i < j
HAND_OFFSETS = [0, 18, 22, 26, 30, 34, 36, 38]   # P L N S G B R
OWN_KING, OTHER_KING = 7, 14 + 7                 # kind c*14 + k of K


# ----------------------------------------------------------------------------- data

def load(path, value, mirror=False):
    d = shogi.open_hcpe(path, value=value, eval_scale=561.0, mirror=mirror).to_dataset()
    return np.asarray(d.tokens), np.asarray(d.value, np.float32)


def pair_indices(tokens, chunk=8192):
    """tokens [N, 2, 40] -> (absolute [N, 2, 780], relative [N, 2, 780]) int32 row indices,
    padding = the table's row count (a zero row): absolute for every pair of present tokens,
    relative only for pairs of two board tokens."""
    n = len(tokens)
    ab = np.empty((n, 2, len(I_PAIR)), np.int32)
    rel = np.empty((n, 2, len(I_PAIR)), np.int32)
    for s in range(0, n, chunk):
        t = tokens[s:s + chunk].astype(np.int32)
        a, b = t[:, :, I_PAIR], t[:, :, J_PAIR]
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        valid = lo >= 0
        ab[s:s + chunk] = np.where(valid, hi * (hi + 1) // 2 + lo, NPAIR_ABS)
        board = valid & (hi < BOARD)
        klo, slo = np.divmod(np.where(board, lo, 0), 81)
        khi, shi = np.divmod(np.where(board, hi, 0), 81)
        dx = shi // 9 - slo // 9
        dy = shi % 9 - slo % 9
        r = ((klo * NKIND + khi) * 17 + dx + 8) * 17 + dy + 8
        rel[s:s + chunk] = np.where(board, r, NREL)
    return ab, rel


def king_relative(tokens):
    """tokens [N, 2, 40] -> ([N, 2, 40] from own king, [N, 2, 40] from other king) rows
    (kind·17 + dx + 8)·17 + dy + 8 of every board token, padding NKREL."""
    t = tokens.astype(np.int32)
    board = (t >= 0) & (t < BOARD)
    kind, s = np.divmod(np.where(board, t, 0), 81)
    f, r = s // 9, s % 9
    out = []
    for king in (OWN_KING, OTHER_KING):
        is_k = board & (kind == king)
        has = is_k.any(axis=2, keepdims=True)
        ks = np.where(is_k, s, 0).sum(axis=2, keepdims=True)   # one king per side
        idx = (kind * 17 + f - ks // 9 + 8) * 17 + r - ks % 9 + 8
        out.append(np.where(board & has, idx, NKREL).astype(np.int32))
    return out


def material_features(tokens):
    """[N, 21] own − other counts: 14 board kinds, then 7 hand kinds (P L N S G B R),
    from perspective 0 (the side to move)."""
    t = tokens[:, 0].astype(np.int32)
    n = len(t)
    f = np.zeros((n, 21), np.float32)
    board = (t >= 0) & (t < BOARD)
    ck = np.where(board, t // 81, -1)
    for k in range(14):
        f[:, k] = (ck == k).sum(1) - (ck == 14 + k).sum(1)
    h = np.where(t >= BOARD, t - BOARD, -1)
    for c, sign in ((0, 1), (1, -1)):
        for j in range(7):
            lo, hi = c * 38 + HAND_OFFSETS[j], c * 38 + HAND_OFFSETS[j + 1]
            f[:, 14 + j] += sign * ((h >= lo) & (h < hi)).sum(1)
    return f


# ---------------------------------------------------------------------------- model
# PyTorch's CPU EmbeddingBag is slow here: with padding_idx its forward is ~18x slower, and
# its dense backward (a fresh 44 MB gradient of the absolute table each step, index_add)
# costs ~0.4 s a step. So the bags run F.embedding_bag (no padding_idx) on a detached table,
# and their gradient is scattered by a 10-line C loop (compiled at start with gcc) into a
# persistent buffer that becomes the table's .grad; the padding row is skipped there, so it
# stays zero (zero gradient, zero weight decay). Then one dense fused AdamW step, as manaka.

_C_SRC = r"""
#include <stdint.h>
void scatter(const int32_t *idx, long nb, long L, const float *g, float *buf, long W, int32_t pad) {
    for (long b = 0; b < nb; b++) {
        const float *gb = g + b * W;
        for (long j = 0; j < L; j++) {
            int32_t r = idx[b * L + j];
            if (r == pad) continue;
            float *d = buf + (long)r * W;
            for (long c = 0; c < W; c++) d[c] += gb[c];
        }
    }
}
"""


def _scatter_lib():
    import ctypes
    import hashlib
    import subprocess
    import tempfile
    so = os.path.join(tempfile.gettempdir(), f"value_probe_{hashlib.md5(_C_SRC.encode()).hexdigest()[:8]}.so")
    if not os.path.exists(so):
        src = so[:-3] + ".c"
        open(src, "w").write(_C_SRC)
        subprocess.check_call(["gcc", "-O2", "-shared", "-fPIC", "-o", so + ".tmp", src])
        os.replace(so + ".tmp", so)
    lib = ctypes.CDLL(so)
    lib.scatter.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_long, ctypes.c_int32]
    return lib


_LIB = None


class Bag(nn.Module):
    """Sum of table rows over a bag of int32 indices [nb, L], padding = the last row."""

    def __init__(self, rows, width, sigma, gen):
        super().__init__()
        self.pad = rows
        self.weight = nn.Parameter(torch.empty(rows + 1, width))
        uniform_(self.weight, sigma, gen)
        with torch.no_grad():
            self.weight[rows].zero_()
        self.buf = None
        self._saved = None

    def forward(self, idx):                       # idx int32 [nb, L]
        out = F.embedding_bag(idx, self.weight.detach(), mode="sum")
        if self.training:
            out.requires_grad_(True)
            self._saved = (idx, out)
        return out

    def scatter_grad(self):
        global _LIB
        if _LIB is None:
            _LIB = _scatter_lib()
        idx, out = self._saved
        self._saved = None
        if self.buf is None:
            self.buf = torch.zeros_like(self.weight)
        self.buf.zero_()
        g = out.grad.contiguous()
        idx = idx.contiguous()
        _LIB.scatter(idx.data_ptr(), idx.shape[0], idx.shape[1], g.data_ptr(), self.buf.data_ptr(),
                     self.weight.shape[1], self.pad)
        self.weight.grad = self.buf


def uniform_(w, sigma, gen):
    with torch.no_grad():
        w.copy_((torch.rand(w.shape, generator=gen) * 2 - 1) * (3 ** 0.5) * sigma)


class Probe(nn.Module):
    def __init__(self, abs_w, rel_w, king, powers, seed, hidden=512, embed=32):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.powers = powers
        self.emb = nn.Embedding(V + 1, embed, padding_idx=V)
        uniform_(self.emb.weight, 1 / T ** 0.5, gen)
        with torch.no_grad():
            self.emb.weight[V].zero_()
        width = powers * embed
        self.abs = Bag(NPAIR_ABS, abs_w, 1 / len(I_PAIR) ** 0.5, gen) if abs_w else None
        self.rel = Bag(NREL, rel_w, 1 / len(I_PAIR) ** 0.5, gen) if rel_w else None
        self.kown = Bag(NKREL, embed, 1 / T ** 0.5, gen) if king else None
        self.koth = Bag(NKREL, embed, 1 / T ** 0.5, gen) if king else None
        width += abs_w + rel_w + (2 * embed if king else 0)
        self.bags = [m for m in (self.abs, self.rel, self.kown, self.koth) if m is not None]
        self.hidden = nn.Linear(2 * width, hidden)
        self.out = nn.Linear(hidden, 1)
        uniform_(self.hidden.weight, (2 / (2 * width)) ** 0.5, gen)
        uniform_(self.out.weight, 1 / hidden ** 0.5, gen)
        nn.init.zeros_(self.hidden.bias)
        nn.init.zeros_(self.out.bias)

    def forward(self, tok, ab=None, rel=None, kown=None, koth=None):
        B = tok.shape[0]
        e = self.emb(tok)                                         # [B, 2, 40, D]
        feats, p = [], e
        for k in range(self.powers):
            if k:
                p = p * e
            feats.append(p.sum(2))                                # [B, 2, D]
        for bag, idx in ((self.abs, ab), (self.rel, rel), (self.kown, kown), (self.koth, koth)):
            if bag is not None:
                feats.append(bag(idx.reshape(2 * B, -1)).reshape(B, 2, -1))
        x = torch.cat(feats, 2).reshape(B, -1)
        return self.out(F.relu(self.hidden(x))).squeeze(1)


ARMS = {  # name: (absolute width, relative width, king-relative bags, power orders)
    "A": (4, 0, False, 4), "B4": (4, 4, False, 4), "B16": (4, 16, False, 4),
    "C4": (0, 4, False, 4), "C16": (0, 16, False, 4), "D": (4, 0, True, 4),
    "BD16": (4, 16, True, 4), "M": (0, 0, False, 4),
}


# ------------------------------------------------------------------------- training

def bce(p, y):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def metrics(p, result, held_eval):
    dec = result != 0.5
    return {"bce_result": bce(p, result),
            "acc_decisive": float(((p > 0.5) == (result > 0.5))[dec].mean()),
            "bce_eval": bce(p, held_eval)}


def inputs(arrs, idx, need):
    return [torch.from_numpy(np.where(arrs["tok"][idx] < 0, V, arrs["tok"][idx]).astype(np.int64))] + \
        [torch.from_numpy(np.ascontiguousarray(arrs[k][idx])) if need[k] else None
         for k in ("ab", "rel", "kown", "koth")]


def predict(model, arrs, need, bs=2048):
    model.eval()
    out = []
    with torch.no_grad():
        for s in range(0, len(arrs["tok"]), bs):
            out.append(torch.sigmoid(model(*inputs(arrs, slice(s, s + bs), need))).numpy())
    model.train()
    return np.concatenate(out)


def run_arm(arm, train, held, held_result, held_eval, args):
    abs_w, rel_w, king, powers = ARMS[arm]
    need = {"tok": True, "ab": bool(abs_w), "rel": bool(rel_w), "kown": king, "koth": king}
    torch.manual_seed(args.seed)
    model = Probe(abs_w, rel_w, king, powers, seed=args.seed)
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    nodecay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": nodecay, "weight_decay": 0.0}], lr=args.lr, fused=True)
    n = len(train["tok"])
    rng = np.random.default_rng(args.seed)                     # same order for every arm
    order, pos = rng.permutation(n), 0
    steps = args.positions // args.batch
    every = max(1, round(args.eval_every / args.batch))
    curve, preds, run_loss, t0 = [], {}, [], time.time()
    for step in range(1, steps + 1):
        if pos + args.batch > n:
            order, pos = rng.permutation(n), 0
        idx = np.sort(order[pos:pos + args.batch])
        pos += args.batch
        y = torch.from_numpy(train["value"][idx])
        loss = F.binary_cross_entropy_with_logits(model(*inputs(train, idx, need)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for bag in model.bags:
            bag.scatter_grad()
        opt.step()
        run_loss.append(float(loss.detach()))
        if step % every == 0 or step == steps:
            p = predict(model, held, need)
            m = metrics(p, held_result, held_eval)
            m.update(positions=step * args.batch, step=step, train_bce=float(np.mean(run_loss)),
                     seconds=round(time.time() - t0, 1))
            run_loss = []
            curve.append(m)
            preds[str(step * args.batch)] = p.astype(np.float32)
            print(f"{arm} s{args.seed} {m['positions']:>7} train {m['train_bce']:.4f} | held BCE(result) "
                  f"{m['bce_result']:.4f} acc {m['acc_decisive']:.3f} BCE(eval) {m['bce_eval']:.4f} "
                  f"| {m['seconds']:.0f}s", flush=True)
    params = sum(p.numel() for p in model.parameters())
    return {"arm": arm, "seed": args.seed, "params": params, "curve": curve,
            "settings": {k: getattr(args, k) for k in ("batch", "lr", "wd", "positions", "mirror", "seed")},
            "load": os.getloadavg()}, preds


# ------------------------------------------------------------------------- material

def material_floor(train_tok, train_result, held_tok, held_result, held_eval):
    vals = np.array([1, 3, 4, 5, 8, 10, 6, 0, 6, 6, 6, 6, 10, 12,      # board P L N S B R G K +P..+R
                     1, 3, 4, 5, 6, 8, 10], np.float32)               # hand P L N S G B R
    ftr, fho = material_features(train_tok), material_features(held_tok)
    out = {}
    for name, xtr, xho in (("fixed values", ftr @ vals[:, None], fho @ vals[:, None]),
                           ("per-kind counts", ftr, fho)):
        X, y = torch.from_numpy(xtr), torch.from_numpy(train_result.copy())
        lin = nn.Linear(X.shape[1], 1).double()
        nn.init.zeros_(lin.weight)
        nn.init.zeros_(lin.bias)
        opt = torch.optim.LBFGS(lin.parameters(), max_iter=200, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits(lin(X.double()).squeeze(1), y.double())
            loss.backward()
            return loss
        opt.step(closure)
        with torch.no_grad():
            p = torch.sigmoid(lin(torch.from_numpy(xho).double())).squeeze(1).numpy()
        out[name] = metrics(p, held_result, held_eval)
    return out


# --------------------------------------------------------------------------- report

def game_ids(path, n):
    counts = [int(x) for x in open(path + ".games").read().split()]
    assert sum(counts) == n, (sum(counts), n)
    return np.repeat(np.arange(len(counts)), counts)


def report(out_dir, boots=2000):
    _, held_result = load(HELD, "result")
    _, held_eval = load(HELD, "eval")
    _, train_eval = load(TRAIN, "eval")
    gid = game_ids(HELD, len(held_result))
    print(f"entropy of the eval target (the least BCE(eval) possible): train {bce(train_eval, train_eval):.4f}, "
          f"held-out {bce(held_eval, held_eval):.4f}; held-out decisive share {(held_result != 0.5).mean():.3f}")
    mat = os.path.join(out_dir, "material.json")
    if os.path.exists(mat):
        for name, m in json.load(open(mat)).items():
            print(f"material floor, {name}: BCE(result) {m['bce_result']:.4f} acc {m['acc_decisive']:.4f} "
                  f"BCE(eval) {m['bce_eval']:.4f}")
    runs = {}
    for f in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        if os.path.basename(f).startswith("material"):
            continue
        r = json.load(open(f))
        runs[(r["arm"], r["seed"], r["settings"].get("mirror", False))] = (r, np.load(f[:-5] + ".npz"))
    pts = sorted({c["positions"] for r, _ in runs.values() for c in r["curve"]})
    print("| arm | seed | mirror | params | " + " | ".join(f"{p // 1000}k" for p in pts) + " | best (at) |")
    print("|---|---|---|---|" + "---|" * (len(pts) + 1))
    for (arm, seed, mir), (r, _) in runs.items():
        c = {x["positions"]: x for x in r["curve"]}
        best = min(r["curve"], key=lambda x: x["bce_result"])
        cells = [f"{c[p]['bce_result']:.4f}" if p in c else "" for p in pts]
        print(f"| {arm} | {seed} | {mir} | {r['params'] / 1e6:.2f} M | " + " | ".join(cells)
              + f" | **{best['bce_result']:.4f}** ({best['positions'] // 1000}k) |")
    print("\nacc on decisive / BCE(eval) at best point:")
    for (arm, seed, mir), (r, _) in runs.items():
        best = min(r["curve"], key=lambda x: x["bce_result"])
        print(f"  {arm} s{seed} m{mir}: acc {best['acc_decisive']:.4f}  BCE(eval) {best['bce_eval']:.4f}  "
              f"min BCE(eval) {min(x['bce_eval'] for x in r['curve']):.4f}  "
              f"train BCE at end {r['curve'][-1]['train_bce']:.4f}  {r['curve'][-1]['seconds']:.0f}s")
    # paired bootstrap over held-out games: arm X minus A at the same seed, same positions seen
    rng = np.random.default_rng(0)
    G = gid.max() + 1
    samples = rng.integers(0, G, size=(boots, G))
    print("\npaired game bootstrap, BCE(result) of arm − A (same seed, same positions seen):")
    for (arm, seed, mir), (r, pr) in runs.items():
        key = ("A", seed, mir)
        if arm == "A" or key not in runs:
            continue
        _, pa = runs[key]
        for p in (pts[len(pts) // 2 - 1], pts[-1]):
            if str(p) not in pr.files or str(p) not in pa.files:
                continue
            y = held_result
            la = -(y * np.log(np.clip(pa[str(p)], 1e-7, 1)) + (1 - y) * np.log(np.clip(1 - pa[str(p)], 1e-7, 1)))
            lx = -(y * np.log(np.clip(pr[str(p)], 1e-7, 1)) + (1 - y) * np.log(np.clip(1 - pr[str(p)], 1e-7, 1)))
            dsum = np.bincount(gid, lx - la, minlength=G)
            cnt = np.bincount(gid, minlength=G)
            d = np.array([dsum[s].sum() / cnt[s].sum() for s in samples])
            print(f"  {arm} s{seed} m{mir} @ {p // 1000}k: {float((lx - la).mean()):+.4f} "
                  f"(95% {np.percentile(d, 2.5):+.4f} .. {np.percentile(d, 97.5):+.4f})")


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arms", default="A,B4,B16,C4,D")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--positions", type=int, default=600_000)
    ap.add_argument("--eval-every", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--mirror", action="store_true", help="train on the records and their mirrors")
    ap.add_argument("--material", action="store_true", help="also fit the material floor")
    ap.add_argument("--out", default="/tmp/value_probe")
    ap.add_argument("--report", metavar="DIR", help="print the tables of the runs in DIR and exit")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.report:
        return report(args.report)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    tok, val = load(TRAIN, "eval", args.mirror)
    htok, hres = load(HELD, "result")
    htok2, heval = load(HELD, "eval")
    assert (htok == htok2).all()
    print(f"train {tok.shape} (mirror={args.mirror}), held {htok.shape}, "
          f"decisive held {(hres != 0.5).mean():.3f}, load {time.time() - t0:.1f}s", flush=True)
    if args.material:
        _, tres = load(TRAIN, "result")
        mat = material_floor(tok[:len(tres)], tres, htok, hres, heval)
        json.dump(mat, open(os.path.join(args.out, "material.json"), "w"), indent=1)
        print("material:", json.dumps(mat), flush=True)
    arms = args.arms.split(",")
    t1 = time.time()
    ab, rel = pair_indices(tok)
    hab, hrel = pair_indices(htok)
    kown, koth = king_relative(tok) if any(ARMS[a][2] for a in arms) else (None, None)
    hkown, hkoth = king_relative(htok) if kown is not None else (None, None)
    # coverage: held-out pair occurrences whose row the training set never hits
    for name, tr, ho, pad in (("absolute", ab, hab, NPAIR_ABS), ("relative", rel, hrel, NREL)):
        hits = np.bincount(tr.ravel(), minlength=pad + 1)[:pad]
        hv = ho[ho != pad]
        print(f"{name} pairs: {int((hits > 0).sum()):,} rows hit in training "
              f"(median hits of a hit row {int(np.median(hits[hits > 0]))}), "
              f"held-out occurrences on unseen rows {float((hits[hv] == 0).mean()):.4f}, "
              f"on rows seen < 10 times {float((hits[hv] < 10).mean()):.4f}", flush=True)
    print(f"indices {time.time() - t1:.1f}s", flush=True)
    train = {"tok": tok, "ab": ab, "rel": rel, "kown": kown, "koth": koth, "value": val}
    held = {"tok": htok, "ab": hab, "rel": hrel, "kown": hkown, "koth": hkoth}
    for arm in arms:
        res, preds = run_arm(arm, train, held, hres, heval, args)
        tag = f"{arm}-s{args.seed}" + ("-mirror" if args.mirror else "")
        json.dump(res, open(os.path.join(args.out, tag + ".json"), "w"), indent=1)
        np.savez_compressed(os.path.join(args.out, tag + ".npz"), **preds)


if __name__ == "__main__":
    main()
