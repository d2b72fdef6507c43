"""Would manaka's policy learn faster if its piece tokens said which pieces are attacked?

An experiment, not part of manaka: each board token (c·14 + k)·81 + s becomes
4·token + 2·attacked + defended, the piece's attack status (attacked by the other side,
defended by its own) read from cshogi's dlshogi features (their attacker-count planes);
hand tokens follow at 4·2268 + (token - 2268), so V = 9,148. The recipe's model
(manaka/shogi/recipe.py, no mirror) trains on these tokens and, as the control, on the plain
ones, for the same positions, evaluated on held-out games against the engine's move and
the game's result:

    python bench/attack_tokens.py plain  TRAIN.hcpe HELD.hcpe 150000 15000 OUT.json
    python bench/attack_tokens.py attack TRAIN.hcpe HELD.hcpe 150000 15000 OUT.json

Result: bench/results/strength-variants.md ("Attack status in the tokens").
"""
import sys, time, json
import numpy as np
import cshogi
from cshogi.dlshogi import make_input_features, FEATURES1_NUM, FEATURES2_NUM
import manaka as mk
from manaka import _core
from manaka.shogi.records import HCPE, read_records
from manaka.shogi.recipe import RECIPE

BOARD = 2268

def rows(path, eval_weight):
    recs = np.ascontiguousarray(read_records(path, HCPE)[0])
    tokens, offsets, labels, target, value, status = _core.shogi_rows(HCPE, recs, eval_weight)
    assert not status.any()
    return recs, tokens.astype(np.int32), offsets, labels.astype(np.int32), target, value

def attack_tokens(recs, tokens):
    out = tokens.copy()
    f1 = np.zeros((FEATURES1_NUM, 9, 9), np.float32); f2 = np.zeros((FEATURES2_NUM, 9, 9), np.float32)
    b = cshogi.Board()
    for i in range(len(recs)):
        b.set_hcp(recs[i, :32]); f1[:] = 0; f2[:] = 0
        make_input_features(b, f1, f2)
        planes = f1.reshape(62, 81)
        mine_att = planes[28:31].sum(0) > 0      # squares the side to move attacks (its frame)
        opp_att = planes[59:62].sum(0) > 0
        if i < 50:  # sanity: my piece planes match perspective 0's own board tokens
            t0 = tokens[i, 0]; t0 = t0[(t0 >= 0) & (t0 < BOARD)]
            own = t0[(t0 // 81) // 14 == 0]
            assert all(planes[(t // 81) % 14, t % 81] == 1 for t in own), i
        for p in range(2):
            t = tokens[i, p]
            board = (t >= 0) & (t < BOARD)
            s = t[board] % 81
            c = (t[board] // 81) // 14          # 0: the perspective's own piece
            s0 = s if p == 0 else 80 - s         # the square in the side to move's frame
            own_is_mover = (c == 0) if p == 0 else (c == 1)
            attacked = np.where(own_is_mover, opp_att[s0], mine_att[s0])
            defended = np.where(own_is_mover, mine_att[s0], opp_att[s0])
            nt = t.copy()
            nt[board] = t[board] * 4 + attacked * 2 + defended
            hand = t >= BOARD
            nt[hand] = 4 * BOARD + (t[hand] - BOARD)
            out[i, p] = nt
    return out

def dataset(tokens, offsets, labels, target, value, V):
    return mk.Dataset.from_arrays(tokens=tokens.astype(np.int16), legal_offsets=offsets, legal_moves=labels,
                                  target=target, value=value, num_tokens=V, num_moves=2187)

def run(train, held, V, positions, every, seed=0):
    mk.set_num_threads(1)
    R = RECIPE
    cfg = mk.ModelConfig(num_tokens=V, num_moves=2187, tokens_per_side=40, embed_dim=R["embed_dim"], orders=R["orders"],
                         pair_dim=R["pair_dim"], hidden=tuple(R["hidden"]), head_width=R["head_width"])
    model = mk.Model(cfg, seed=seed)
    tr = mk.Trainer(model, lr=R["lr"], weight_decay=R["weight_decay"], eps=R["eps"], warmup_steps=R["warmup"])
    loader = mk.Loader(train, batch_size=R["batch_size"], producers=1, shuffle=True, seed=seed)
    seen, curve, t0 = 0, [], time.perf_counter()
    nxt = every
    while seen < positions:
        for b in loader:
            tr.step(b); seen += len(b)
            if seen >= nxt:
                nxt += every
                r = mk.evaluate(model, held, batch_size=1024)
                curve.append({"seen": seen, "top1": r["accuracy"], "policy_nll": r["policy_loss"], "value_bce": r["value_loss"],
                              "seconds": time.perf_counter() - t0})
                print(V, curve[-1], flush=True)
            if seen >= positions: break
    loader.close()
    return curve

if __name__ == "__main__":
    which, train_path, held_path, positions, every = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    tr = rows(train_path, 1.0); he = rows(held_path, 0.0)
    if which == "attack":
        t0 = time.perf_counter()
        ttr, the = attack_tokens(tr[0], tr[1]), attack_tokens(he[0], he[1])
        print("attack tokens in", time.perf_counter() - t0, "s", flush=True)
        V = 4 * BOARD + 76
    else:
        ttr, the, V = tr[1], he[1], 2344
    train = dataset(ttr, *tr[2:], V); held = dataset(the, *he[2:], V)
    curve = run(train, held, V, positions, every)
    json.dump({"which": which, "V": V, "curve": curve, "train": train_path, "held": held_path}, open(sys.argv[6], "w"))
