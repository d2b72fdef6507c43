"""Where manaka's policy loses to the ResNet: held-out top-1 by kind of the engine's move
(drop or board move, capture, the moving piece, promotion, check, number of legal moves).

An experiment, not part of manaka (cshogi names the moves; torch runs the ResNet):

    python bench/policy_by_move_kind.py HELD.hcpe MANAKA_MODEL RESNET_PT

MANAKA_MODEL and RESNET_PT as `python -m manaka.bench strength --save DIR` writes them
(manaka.model, resnet.pt: the ResNet 3 x 64). Result quoted in docs/shogi.md.
"""
import sys
import numpy as np, torch, cshogi, collections
import manaka as mk
from manaka.bench.strength import Table
from manaka.bench.strength_resnet import ResNetRun, features
from manaka.shogi.recipe import RECIPE
H, MODEL, RESNET = sys.argv[1:4]
held_m = Table(H, moves=RECIPE["moves"]); held_r = Table(H)
model = mk.Model.load(MODEL)
run = ResNetRun(3, 64, lr=1e-3, seed=0); run.net.load_state_dict(torch.load(RESNET)); run.net.eval()
n = len(held_m); cm = np.zeros(n, bool); cr = np.zeros(n, bool)
for idx in held_m.batches(512):
    lg, _ = model.forward(mk.Batch(held_m.tokens[idx].astype(np.int32), held_m.legal(idx), held_m.counts[idx], held_m.target[idx], held_m.result[idx]))
    lg = np.where(held_m.legal(idx) >= 0, lg, -1e30); cm[idx] = lg.argmax(1) == held_m.target[idx]
    with torch.no_grad():
        l2, _ = run.predict(features(held_r.records[idx]), held_r.legal(idx), held_r.counts[idx])
    l2 = np.asarray(l2); l2 = np.where(held_r.legal(idx) >= 0, l2, -1e30); cr[idx] = l2.argmax(1) == held_r.target[idx]
print("overall manaka %.3f resnet %.3f" % (cm.mean(), cr.mean()))
cats = collections.defaultdict(list); b = cshogi.Board()
PN = ["", "P", "L", "N", "S", "B", "R", "G", "K", "+P", "+L", "+N", "+S", "+B", "+R"]
recs = np.ascontiguousarray(held_m.records).view(cshogi.HuffmanCodedPosAndEval).reshape(-1)
for i, rec in enumerate(recs):
    b.set_hcp(rec["hcp"]); m = b.move_from_move16(int(rec["bestMove16"]))
    keys = []
    if cshogi.move_is_drop(m): keys.append("drop"); keys.append("drop " + PN[cshogi.move_drop_hand_piece(m) + 1])
    else:
        cap = b.piece(cshogi.move_to(m)) != 0
        keys.append("capture" if cap else "quiet board move")
        keys.append("moves " + PN[cshogi.piece_to_piece_type(b.piece(cshogi.move_from(m)))])
        if cshogi.move_is_promotion(m): keys.append("promotion")
    keys.append("in check" if b.is_check() else "not in check")
    nl = held_m.counts[i]; keys.append("legal <40" if nl < 40 else "legal 40-100" if nl < 100 else "legal 100+")
    for k in keys: cats[k].append(i)
for k in sorted(cats, key=lambda k: -len(cats[k])):
    ix = np.array(cats[k]); print(f"{k:20s} n={len(ix):6d} share={len(ix)/n:5.1%} manaka={cm[ix].mean():5.1%} resnet={cr[ix].mean():5.1%} gap={cr[ix].mean()-cm[ix].mean():+5.1%} lost={(cr[ix].sum()-cm[ix].sum())/n:+.2%}")
