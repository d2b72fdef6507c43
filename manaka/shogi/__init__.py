"""manaka.shogi: shogi positions, dlshogi HCPE / hcpe3 and YaneuraOu PSV records (docs/shogi.md).

Legal moves, dlshogi policy labels, manaka's tokens and record decoding are C
(csrc/shogi/); cshogi is only the tests' oracle and is not needed here.
"""
from .position import (MOVE_ENCODINGS, MOVE_KINDS, NUM_LABELS, moves_of, num_labels, NUM_TOKENS, STARTING_SFEN, TOKENS_PER_SIDE, Position, apply_move, encode,
                       in_check, label_to_usi, legal_labels, legal_moves, move_to_usi, parse_sfen, usi_to_label,
                       usi_to_move)

from .inference import policy
from .records import HCPE, PSV, RecordFiles, decode, open_hcpe, open_psv, open_records, read_records
from .hcpe3 import Hcpe3Files, open_hcpe3

__all__ = ["MOVE_ENCODINGS", "MOVE_KINDS", "moves_of", "num_labels", "policy", "RecordFiles", "Hcpe3Files", "open_hcpe3", "open_hcpe", "open_psv", "open_records", "read_records", "decode", "HCPE", "PSV", "Position", "parse_sfen", "legal_moves", "legal_labels", "encode", "label_to_usi",
           "usi_to_label", "move_to_usi", "usi_to_move", "apply_move", "in_check", "STARTING_SFEN", "NUM_TOKENS", "NUM_LABELS", "TOKENS_PER_SIDE"]
