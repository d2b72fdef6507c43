"""Would the policy gain from knowing which piece moves? An experiment, not part of manaka.

dlshogi labels name a move's direction and destination, not the piece. Here each legal
board move finds its mover (the first piece on the reverse ray from the destination, on the
side to move's board, as manaka's tokens show it; checked against cshogi on 22,172 legal
moves) and reads logit += q . P[dlshogi label * 14 + kind] (P [2187 * 14, W], init 0; drops
read kind 0, their label names the piece already), on top of the shogi recipe in
manaka.torch (the same batches and schedule as the recipe's other prototypes):

    python bench/move_piece_prototype.py piece|pieceh POSITIONS TRAIN.hcpe HELD.hcpe

(pieceh: also a MoveHidden row by (direction, kind) added to the units.) Result, 300 k
positions seen on 280 k engine positions, 12,693 held-out positions of other games: piece
26.3 % top-1, NLL 2.820, against 25.6 % / 2.846 for the recipe (docs/shogi.md).
"""
import sys, time
import torch
import manaka as mk
from manaka import shogi
from manaka.shogi import recipe as R
from manaka.torch import Network, batch_tensors, param_groups
from manaka.torch import ops
from manaka.torch.network import relative_keys

torch.set_num_threads(1)
arm = sys.argv[1]
positions = int(sys.argv[2])
r = R.recipe()
cfg = R.model_config(r)
NL = 2187
# direction vectors (dfile, drank) of dlshogi's ten board directions, origin -> destination,
# squares s = 9 (file - 1) + (rank - 1) seen by the side to move (LEFT: towards file 9)
VEC = [(0, -1), (1, -1), (-1, -1), (1, 0), (-1, 0), (0, 1), (1, 1), (-1, 1), (1, -2), (-1, -2)]

def movers(tokens, legal, counts):
    """[B, L] kind (0..13) of each legal board move's mover; 0 for drops and padded slots."""
    side = tokens[:, 0].to(torch.int64)                       # [B, T]
    B = side.shape[0]
    board = torch.full((B, 82), -1, dtype=torch.int64)         # square 81: off the board
    isb = (side >= 0) & (side < 2268)
    v = torch.where(isb, side, 0)
    sq = torch.where(isb, v % 81, 81)
    board.scatter_(1, sq, torch.where(isb, v // 81, -1))      # c * 14 + k
    board[:, 81] = -1
    used = torch.arange(legal.shape[1]) < counts.to(torch.int64).unsqueeze(1)
    lab = torch.where(used, legal.to(torch.int64), 0) % NL
    d = lab // 81; dest = lab % 81
    isdrop = d >= 20
    d10 = torch.where(isdrop, 0, d % 10)
    vec = torch.tensor(VEC)
    df = vec[d10, 0]; dr = vec[d10, 1]
    f0 = dest // 9; r0 = dest % 9
    kind = torch.full_like(lab, -1)
    for k in range(1, 9):
        f = f0 - k * df; rr = r0 - k * dr
        inb = (f >= 0) & (f < 9) & (rr >= 0) & (rr < 9)
        s = torch.where(inb, f * 9 + rr, 81)
        piece = board.gather(1, s)
        take = (kind < 0) & (piece >= 0)
        kind = torch.where(take, piece, kind)
    kind = torch.where(isdrop | ~used | (kind < 0), 0, kind % 14)
    return kind, lab, d, used

class Piece(Network):
    def __init__(self, config, seed=0):
        super().__init__(config, seed)
        D, W = config.move_hidden, config.head_width
        self.P = torch.nn.Parameter(torch.zeros(NL * 14, W))
        self.PH = torch.nn.Parameter(torch.zeros(27 * 14, D)) if arm == "pieceh" else None
    def logits(self, tokens, legal, counts):
        x = self.body(self.features(tokens))
        logits, z = self.heads(x, legal, counts)
        q = self.policy(x)
        kind, lab, d, used = movers(tokens, legal, counts)
        logits = logits + self.move_pair_sums(tokens, legal, counts)
        logits = logits + self.move_pair_relative_sums(tokens, legal, counts)
        index, on_board, used, classes = relative_keys(self.relative_token_part, self.relative_class_part,
                                                       tokens, legal, counts)
        rows = self.move_hidden_relative[index]
        B, T, L, D = rows.shape
        weight = on_board.to(rows.dtype).unsqueeze(1)
        board = torch.bmm(weight, rows.reshape(B, T, L * D)).reshape(B, L, D)
        pre = self.move_hidden_class[classes] + board
        if self.PH is not None:
            pre = pre + self.PH[d * 14 + kind]
        term = torch.relu(pre) @ self.move_hidden_out[0]
        pk = (self.P[lab * 14 + kind] * q.unsqueeze(1)).sum(-1)       # [B, L]
        logits = logits + torch.where(used, term + pk, 0)
        logits = logits + self.move_shared(q, legal, counts)
        return logits, z

torch.manual_seed(0)
net = Piece(cfg, seed=1)
opt = torch.optim.AdamW(param_groups(net, r["weight_decay"]), lr=r["lr"])
train = shogi.open_hcpe(sys.argv[3], value=r["value"], mirror=True, moves=r["moves"])
held = shogi.open_hcpe(sys.argv[4], value="result", moves=r["moves"])
hb = [batch_tensors(b) for b in mk.Loader(held, batch_size=1024, producers=1, shuffle=False, copy=True)]

def evaluate(n=6):
    net.eval(); c = k = 0; nll = 0.0; bce = 0.0
    with torch.no_grad():
        for b in hb[:n]:
            lg, z = net.logits(b["tokens"], b["legal"], b["counts"])
            lg = lg.masked_fill(b["legal"] < 0, -1e30)
            t = b["target"].long()
            c += (lg.argmax(1) == t).sum().item(); k += len(t)
            nll -= torch.log_softmax(lg, 1).gather(1, t[:, None]).sum().item()
            bce += torch.nn.functional.binary_cross_entropy_with_logits(z, b["value"], reduction="sum").item()
    net.train(); return c / k, nll / k, bce / k

# the recipe's schedule over the run: 20 warm-up steps, then cosine to 0
total = positions // 512
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 20 if s < 20 else
                                          0.5 * (1 + __import__("math").cos(__import__("math").pi * min(1.0, (s - 20) / (total - 20)))))
loader = mk.Loader(train, batch_size=512, producers=1, shuffle=True, seed=0)
seen = step = 0; t0 = time.time()
while seen < positions:
    for b in loader:
        bt = batch_tensors(b)
        loss = net.loss(**bt, check=False)
        opt.zero_grad(); loss.backward(); opt.step(); sched.step()
        seen += len(bt["counts"]); step += 1
        if step % 200 == 0:
            a, l, v = evaluate()
            print(f"{arm} seen {seen} top1 {a:.4f} nll {l:.4f} bce {v:.4f} {time.time()-t0:.0f}s", flush=True)
        if seen >= positions: break
a, l, v = evaluate(len(hb)); print(f"{arm} FINAL(all held-out) seen {seen} top1 {a:.4f} nll {l:.4f} bce {v:.4f} {time.time()-t0:.0f}s")
