"""Move label encodings (manaka.shogi.MOVE_ENCODINGS, csrc/shogi/position.h): each legal
move's class against cshogi, the oracle, computed independently of the C attack tables
(captured piece from the move, "defended" from the opponent's pseudo-legal replies, check
from the position after the move, "escape" from a null move), and the encodings through
the producers, the Loader, fit, evaluate and inference."""
import os

import numpy as np
import pytest

from shogi_reference import c_position, cshogi, random_endgames, random_positions, records

import manaka as mk
from manaka import _core, shogi
from manaka.shogi.position import MOVE_ENCODINGS, NUM_LABELS, moves_of, num_labels


def _attacked_by_mover(board, square) -> bool:
    """Whether the side to move of `board` has a piece (not a drop) that can go to `square`."""
    return any(cshogi.move_to(x) == square and not cshogi.move_is_drop(x) for x in board.pseudo_legal_moves)


def oracle_class(board, m):
    """(the move's class in the full encoding, whether its "defended" bit is known): the
    captured kind + 15 defended + 30 check + 60 the mover was attacked. After a move that
    checks, the opponent's pseudo-legal moves are evasions only, so "defended" is not read
    there."""
    cap = cshogi.move_cap(m)
    cls = 0 if cap == 0 else cshogi.piece_to_piece_type(cap)  # cshogi's types are 1 + manaka's kinds
    to, drop = cshogi.move_to(m), cshogi.move_is_drop(m)
    escape = False
    if not drop:
        board.push_pass()
        escape = _attacked_by_mover(board, cshogi.move_from(m))
        board.pop_pass()
    board.push(m)
    check = board.is_check()
    defended = _attacked_by_mover(board, to)
    board.pop()
    return cls + 15 * defended + 30 * check + 60 * escape, not check


# cshogi's hand pieces P L N S G B R as manaka's kinds (P L N S B R G K ...)
_HAND_KIND = [0, 1, 2, 3, 6, 4, 5]


def _sfen_rows(board_field):
    """An SFEN board field as 9 rows (rank a first) of 9 cells (file 9 first), '' empty."""
    rows = []
    for text in board_field.split("/"):
        row, i = [], 0
        while i < len(text):
            if text[i].isdigit():
                row += [""] * int(text[i])
                i += 1
            else:
                n = 2 if text[i] == "+" else 1
                row.append(text[i:i + n])
                i += n
        rows.append(row)
    return rows


def _sfen_field(rows):
    out = []
    for row in rows:
        text, empty = "", 0
        for cell in row:
            if cell:
                text += (str(empty) if empty else "") + cell
                empty = 0
            else:
                empty += 1
        out.append(text + (str(empty) if empty else ""))
    return "/".join(out)


def oracle_supported(board, m):
    """Whether another piece of the side to move attacks the move's destination once the
    move is made, from cshogi alone: the mover on the destination is replaced by an enemy
    gold and the side to move's pseudo-legal board moves onto it are looked for (None when
    that position has the side to move in check: its generator then gives evasions only)."""
    to = cshogi.move_to(m)
    board.push(m)
    parts = board.sfen().split()
    board.pop()
    rows = _sfen_rows(parts[0])
    black = board.turn == cshogi.BLACK
    rows[to % 9][8 - to // 9] = "g" if black else "G"
    parts[0], parts[1] = _sfen_field(rows), "b" if black else "w"
    probe = cshogi.Board(" ".join(parts))
    if probe.is_check():
        return None
    return any(cshogi.move_to(x) == to and not cshogi.move_is_drop(x) for x in probe.pseudo_legal_moves)


# Every promoted piece free to move, for each side: random games rarely promote a silver, so
# without these a run could leave a kind of mover untried (and the test said so, at random).
PROMOTED = ("4k4/9/9/2+S1+N1+L2/9/2+P1+B1+R2/9/9/4K4 b - 1",
            "4k4/9/2+r1+b1+p2/9/2+l1+n1+s2/9/9/9/4K4 w - 1")


def _positions(seed):
    yield from random_positions(300, seed)
    yield from random_endgames(100, seed + 1)
    for sfen in PROMOTED:
        yield cshogi.Board(sfen)


@pytest.mark.parametrize("seed", [5, 6])
def test_classes_agree_with_cshogi(seed):
    seed = seed * 1000 + np.random.SeedSequence().entropy % 1000  # fresh games every run
    seen = {"capture": 0, "defended": 0, "check": 0, "escape": 0}
    seen_movers, seen_supported = set(), [0, 0]
    compared = 0
    for board in _positions(seed):
        if board.is_check():  # null moves are refused in check; the escape bit is tested elsewhere
            continue
        cells, hand, side = c_position(board)
        by_encoding = {name: _core.shogi_analyse(cells, hand, side, code) for name, code in MOVE_ENCODINGS.items()}
        moves = by_encoding["dlshogi"][1]
        for name, (_, m, lab, _) in by_encoding.items():
            np.testing.assert_array_equal(m, moves)  # the same moves, in the same order
            np.testing.assert_array_equal(lab % NUM_LABELS, by_encoding["dlshogi"][2])
            assert lab.max(initial=0) < num_labels(name)
        got = {name: {int(mv): int(l) // NUM_LABELS for mv, l in zip(moves, by_encoding[name][2])}
               for name in MOVE_ENCODINGS}
        got["full"] = got["capture-defended-check-escape"]
        for m in board.legal_moves:
            key = cshogi.move16(m)
            # the mover encoding: the full class plus 120 times the moving piece's kind
            # (cshogi's piece type - 1: manaka's kinds; a drop: the dropped piece)
            mover = _HAND_KIND[cshogi.move_drop_hand_piece(m)] if cshogi.move_is_drop(m) else \
                cshogi.piece_to_piece_type(board.piece(cshogi.move_from(m))) - 1
            assert got["capture-defended-check-escape-mover"][key] == got["full"][key] + 120 * mover, \
                (board.sfen(), cshogi.move_to_usi(m))
            seen_movers.add(mover)
            sup = got["capture-defended-check-escape-mover-supported"][key]
            assert sup % 1680 == got["capture-defended-check-escape-mover"][key]
            want_sup = oracle_supported(board, m)
            if want_sup is not None:
                assert sup // 1680 == want_sup, (board.sfen(), cshogi.move_to_usi(m))
                seen_supported[want_sup] += 1
            want, defended_known = oracle_class(board, m)
            key = cshogi.move16(m)
            full = got["full"][key]
            if not defended_known:  # compare every bit but "defended"
                want, full = want - (want // 15 % 2) * 15, full - (full // 15 % 2) * 15
            assert full == want, (board.sfen(), cshogi.move_to_usi(m), full, want)
            # each encoding is the first bits of the next one
            assert got["capture"][key] == got["full"][key] % 15
            assert got["capture-defended"][key] == got["full"][key] % 30
            assert got["capture-defended-check"][key] == got["full"][key] % 60
            assert got["dlshogi"][key] == 0
            seen["capture"] += want % 15 > 0
            seen["defended"] += want // 15 % 2
            seen["check"] += want // 30 % 2
            seen["escape"] += want // 60
            compared += 1
    assert compared > 20000 and min(seen.values()) > 200, (compared, seen)
    assert seen_movers == set(range(14)), seen_movers  # every kind moved, promoted ones too
    assert min(seen_supported) > 2000, seen_supported


def test_escape_bit_in_check():
    """In check the king is the attacked piece: each of its moves is an escape, and taking
    the undefended checker is a capture of a rook that is not defended."""
    board = cshogi.Board("4k4/9/9/9/9/9/9/4r4/4K4 b G 1")  # a rook checks the king from 5h
    cells, hand, side = c_position(board)
    _, moves, lab, _ = _core.shogi_analyse(cells, hand, side, MOVE_ENCODINGS["capture-defended-check-escape"])
    cls = {shogi.move_to_usi(int(m)): int(l) // NUM_LABELS for m, l in zip(moves, lab)}
    assert cls["5i4i"] // 60 == 1 and cls["5i6i"] // 60 == 1  # the king was attacked on 5i
    assert cls["5i5h"] % 15 == 1 + 5  # king takes the rook (kind 5), undefended: no 15
    assert cls["5i5h"] // 15 % 2 == 0


def test_num_labels_and_names():
    assert [num_labels(n) for n in ("dlshogi", "capture", "capture-defended", "capture-defended-check",
                                    "capture-defended-check-escape", "capture-defended-check-escape-mover",
                                    "capture-defended-check-escape-mover-supported")] == \
        [2187, 2187 * 15, 2187 * 30, 2187 * 60, 2187 * 120, 2187 * 120 * 14, 2187 * 120 * 28]
    assert shogi.MOVE_KINDS == {"capture-defended-check-escape-mover": 14,
                                "capture-defended-check-escape-mover-supported": 28}
    for name in MOVE_ENCODINGS:
        assert moves_of(num_labels(name)) == name
    with pytest.raises(ValueError, match="num_moves=2188 reads no shogi move encoding"):
        moves_of(2188)
    with pytest.raises(ValueError, match="moves must be one of"):
        num_labels("captures")
    with pytest.raises(ValueError, match="unknown move label encoding 9"):
        _core.shogi_analyse(*c_position(cshogi.Board()), 9)


@pytest.fixture
def hcpe_file(tmp_path):
    rng = np.random.default_rng(np.random.SeedSequence().entropy)
    # the generator goes on playing on the board it yielded: keep copies
    boards = [b.copy() for b in random_positions(300, int(rng.integers(1 << 30)))]
    recs, _ = records(boards, shogi.HCPE, rng)
    path = tmp_path / "games.hcpe"
    recs.tofile(path)
    return str(path)


@pytest.mark.parametrize("moves", ["capture", "capture-defended", "capture-defended-check-escape",
                                   "capture-defended-check-escape-mover",
                                   "capture-defended-check-escape-mover-supported"])
def test_records_in_an_encoding_are_the_dlshogi_rows_with_classes(hcpe_file, moves):
    plain = shogi.open_hcpe(hcpe_file, mirror=True).to_dataset()
    rich_files = shogi.open_hcpe(hcpe_file, mirror=True, moves=moves)
    assert rich_files.num_moves == num_labels(moves) and rich_files.meta["moves"] == moves
    rich = rich_files.to_dataset()
    for key in ("tokens", "legal_offsets", "target", "value"):
        np.testing.assert_array_equal(getattr(plain, key), getattr(rich, key))
    np.testing.assert_array_equal(rich.legal_moves % NUM_LABELS, plain.legal_moves)
    assert (rich.legal_moves >= NUM_LABELS).any()
    # the producers (Loader over the files) give the same rows as to_dataset
    with mk.Loader(rich_files, batch_size=64, producers=2, shuffle=False) as loader:
        batch = next(iter(loader))
        first = np.asarray(batch.legal)[0, :int(batch.counts[0])]
        np.testing.assert_array_equal(first, rich.legal_moves[:rich.legal_offsets[1]])


def test_a_model_refuses_records_in_another_encoding(hcpe_file):
    cfg = mk.ModelConfig(num_tokens=shogi.NUM_TOKENS, num_moves=num_labels("capture"), tokens_per_side=40,
                         embed_dim=4, orders=2, pair_dim=1, hidden=(8,), head_width=4)
    model = mk.Model(cfg, seed=0)
    dlshogi = shogi.open_hcpe(hcpe_file)  # its labels are all < num_moves: only the encoding can tell
    with pytest.raises(ValueError, match="encoding 'dlshogi' .* model reads encoding 'capture'"):
        mk.fit(model, mk.Loader(dlshogi, batch_size=32), steps=1, progress=False)
    with pytest.raises(ValueError, match="evaluate: the data's move labels are in encoding 'dlshogi'"):
        mk.evaluate(model, dlshogi)
    with pytest.raises(ValueError, match="fit: eval_data: the data's move labels"):
        mk.fit(model, mk.Loader(shogi.open_hcpe(hcpe_file, moves="capture"), batch_size=32), steps=1,
               eval_data=dlshogi, progress=False)
    history = mk.fit(model, mk.Loader(shogi.open_hcpe(hcpe_file, moves="capture"), batch_size=32), steps=2,
                     progress=False)
    assert len(history.records) >= 1


@pytest.mark.parametrize("moves", [["capture"], {"a": 1}, 3, None, "no-such-encoding"])
def test_a_dataset_meta_whose_moves_is_no_encoding_is_not_read_as_one(tmp_path, moves):
    # meta.json is the user's file: a list there was an unhashable-type TypeError in fit and evaluate
    import json
    from model_cases import arrays

    path = mk.Dataset.from_arrays(**arrays(N=40)).save(tmp_path / "ds")
    meta = json.load(open(os.path.join(path, "meta.json")))
    meta["moves"] = moves
    json.dump(meta, open(os.path.join(path, "meta.json"), "w"))
    ds = mk.Dataset.open(path)
    model = mk.Model(mk.ModelConfig(num_tokens=ds.num_tokens, num_moves=ds.num_moves,
                                    tokens_per_side=ds.tokens_per_side, embed_dim=4, orders=2, pair_dim=1,
                                    hidden=(), head_width=4))
    assert mk.evaluate(model, ds)["positions"] == 40
    assert len(mk.fit(model, mk.Loader(ds, batch_size=16), steps=1, progress=False, log=lambda s: None).records) == 1


def test_policy_reads_the_models_encoding():
    """manaka.shogi.policy of a model in the "capture-defended" encoding equals a forward on
    the labels the producers would give, paired with the right moves."""
    cfg = mk.ModelConfig(num_tokens=shogi.NUM_TOKENS, num_moves=num_labels("capture-defended"), tokens_per_side=40,
                         embed_dim=4, orders=2, pair_dim=1, hidden=(8,), head_width=4)
    model = mk.Model(cfg, seed=3)
    sfen = "lnsgkgsnl/1r5b1/pppppp1pp/6p2/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL b - 3"  # 2x2 bishops face each other
    pos = shogi.parse_sfen(sfen)
    ranked, value = shogi.policy(model, pos)
    _, moves, lab, tok = pos.analyse("capture-defended")
    logits, v = model.forward(mk.Batch(tok[None].astype(np.int32), lab[None].astype(np.int32),
                                       np.array([len(lab)], np.int32), np.zeros(1, np.int32),
                                       np.full(1, 0.5, np.float32)))
    z = np.asarray(logits[0, :len(lab)], np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    want = {shogi.move_to_usi(int(m)): q for m, q in zip(moves, p)}
    assert {u: pytest.approx(q, rel=1e-5) for u, q in want.items()} == dict(ranked)
    assert value == pytest.approx(float(v[0]), rel=1e-6)
    bishop_takes = int(np.nonzero([shogi.move_to_usi(int(m)) == "8h2b+" for m in moves])[0][0])
    assert lab[bishop_takes] // NUM_LABELS == 1 + 4 + 15  # takes a bishop (kind 4) defended by the silver
