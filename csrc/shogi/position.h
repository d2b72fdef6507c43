/* A shogi position and its legal moves (docs/shogi.md, docs/design.md §6).
 *
 * Squares: s = 9 * (file - 1) + (rank - 1), 1a = 0 .. 9i = 80 (cshogi / YaneuraOu numbering).
 * Black (sente) moves towards rank a. Piece kinds 0..13 in the order
 * P L N S B R G K +P +L +N +S +B +R (promoted = kind + 8 for P L N S B R).
 * Hand kinds 0..6 are P L N S B R G (the first seven board kinds).
 *
 * Moves are cshogi's 16-bit moves (Apery's layout): to | from << 7 | promote << 14, with
 * from = 81 + hand kind for a drop. The generator works on bitboards (position.c says how)
 * and applies every rule of the game (drops, two pawns on a file, no pawn-drop mate,
 * forced promotion, pins, king safety, evasions). Non-promoting moves are always generated
 * where legal, as cshogi's legal_moves does. */
#ifndef MANAKA_SHOGI_POSITION_H
#define MANAKA_SHOGI_POSITION_H

#include <stdint.h>

#define MK_SHOGI_SQUARES 81
#define MK_SHOGI_NO_SQUARE 81
#define MK_SHOGI_HAND_KINDS 7
/* No position has more legal moves than 593; the buffer leaves room. */
#define MK_SHOGI_MAX_MOVES 600
#define MK_SHOGI_TOKENS 40
#define MK_SHOGI_NUM_TOKENS 2344
#define MK_SHOGI_NUM_LABELS 2187

enum { MK_PAWN, MK_LANCE, MK_KNIGHT, MK_SILVER, MK_BISHOP, MK_ROOK, MK_GOLD, MK_KING,
       MK_PRO_PAWN, MK_PRO_LANCE, MK_PRO_KNIGHT, MK_PRO_SILVER, MK_HORSE, MK_DRAGON };

/* A board cell: 0 empty, else 1 + kind + 16 * color (color 0 Black, 1 White). */
#define MK_SHOGI_PIECE(color, kind) ((uint8_t)(1 + (kind) + 16 * (color)))
#define MK_SHOGI_KIND(piece) (((piece) & 15) - 1)
#define MK_SHOGI_COLOR(piece) ((piece) >> 4)

typedef struct {
    uint8_t board[MK_SHOGI_SQUARES];
    uint8_t hand[2][MK_SHOGI_HAND_KINDS];
    uint8_t side; /* to move: 0 Black, 1 White */
} mk_shogi_pos;

/* Why a position is refused (0 = fine). */
enum { MK_SHOGI_OK = 0, MK_SHOGI_BAD_PIECE, MK_SHOGI_BAD_KINGS, MK_SHOGI_TOO_MANY,
       MK_SHOGI_DEAD_PIECE, MK_SHOGI_TWO_PAWNS, MK_SHOGI_KING_CAPTURABLE };

/* Checks what the generator relies on: cells and hands in range, exactly one king each,
 * at most the 40 pieces of a set (per kind), no piece that could never move (a pawn or
 * lance on the last rank, a knight on the last two), no two unpromoted pawns of one side
 * on a file, and the side not to move not in check. Returns MK_SHOGI_OK or the reason. */
int mk_shogi_validate(const mk_shogi_pos *pos);
const char *mk_shogi_reason(int code);

/* Fills moves[] with every legal move (at most MK_SHOGI_MAX_MOVES); returns the count.
 * The position must have passed mk_shogi_validate. */
int mk_shogi_legal_moves(const mk_shogi_pos *pos, uint16_t *moves);

/* The same, and each move's dlshogi label (mk_shogi_label's value) in labels[]. */
int mk_shogi_legal_moves_labels(const mk_shogi_pos *pos, uint16_t *moves, int32_t *labels);

/* dlshogi's policy label of a move by `side`: direction * 81 + destination, seen from
 * the side to move (squares rotated for White); drops are directions 20..26 in the hand
 * kind order P L N S B R G (cshogi.dlshogi.make_move_label). */
int mk_shogi_label(uint16_t move, int side);

/* The 2 x 40 tokens of docs/design.md §6 (-1 in unused slots). */
void mk_shogi_tokens(const mk_shogi_pos *pos, int32_t *tokens);

/* Legal labels sorted ascending (a position's moves have distinct labels), and the index
 * of `move` among them in *target (-1 if it is not legal). Returns the count. */
int mk_shogi_legal_labels(const mk_shogi_pos *pos, uint16_t move, int32_t *labels,
                          int32_t *target);

/* Below: the bitboard form the functions above build internally, for csrc/shogi's own
 * producers (records.c decodes a record straight into it, so that one producer row builds
 * it once). It is the position in the side to move's frame: colour 0 is the side to move
 * and, when that is White, every square s is 80 - s and every piece has its colour
 * swapped (the hands too), so that the generator only ever generates Black's moves and
 * the squares are those of dlshogi's labels and of the first perspective's tokens already.
 * Bit s of a board is (frame) square s; piece[] is indexed by cell value (MK_SHOGI_PIECE;
 * [0] is unused). */
__extension__ typedef unsigned __int128 mk_shogi_bb;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define MK_SHOGI_WORD(s) (1 - ((s) >> 6))
#else
#define MK_SHOGI_WORD(s) ((s) >> 6)
#endif

typedef struct {
    union {
        mk_shogi_bb piece[32];
        uint64_t piece_words[32][2]; /* the same, as words: [MK_SHOGI_WORD(s)] holds square s */
    };
    mk_shogi_bb occ[2], all; /* per colour, both */
    /* per colour: gold and the promoted minor pieces; bishop and horse; rook and dragon;
     * king, horse and dragon (the pieces that step like a king in some direction) */
    mk_shogi_bb golds[2], bishops[2], rooks[2], kinglike[2];
    int king[2];             /* squares, -1 when a side has none */
    uint8_t cell[MK_SHOGI_SQUARES];       /* the cells, by frame square, colours of the frame */
    uint8_t hand[2][MK_SHOGI_HAND_KINDS]; /* the hands: [0] the side to move's */
    int side;                             /* the position's side to move: 1 if the frame is rotated */
} mk_shogi_boards;

/* Builds the attack tables (once, thread-safe); every function above calls it itself. */
void mk_shogi_init(void);

/* Fills occ, all, king and the unions from piece[] (the pieces themselves being set by
 * the caller). */
void mk_shogi_boards_finish(mk_shogi_boards *boards);

/* mk_shogi_validate for boards whose cells are all valid pieces or empty; pos gives the
 * side to move and the hands (its cells are not read). */
int mk_shogi_validate_boards(const mk_shogi_pos *pos, const mk_shogi_boards *boards);

/* The position (cells, hands, side to move) the boards hold. */
void mk_shogi_boards_position(const mk_shogi_boards *boards, mk_shogi_pos *pos);

/* mk_shogi_legal_labels and mk_shogi_tokens on a validated position's boards (pos is not
 * read). */
int mk_shogi_legal_labels_boards(const mk_shogi_pos *pos, const mk_shogi_boards *boards, uint16_t move,
                                 int32_t *labels, int32_t *target);
void mk_shogi_tokens_boards(const mk_shogi_pos *pos, const mk_shogi_boards *boards, int32_t *tokens);

/* Move label encodings. A policy label is the move's dlshogi label plus
 * MK_SHOGI_NUM_LABELS times a class of the move in its position, so that the policy head's
 * per-label embedding sees what a position-independent label cannot. Each encoding adds a
 * feature to the one before (Python names in manaka/shogi/position.py):
 *   DLSHOGI   class 0: the plain dlshogi label (2187 labels)                   "dlshogi"
 *   CAPTURE   0 for no capture, else 1 + the captured piece's kind (0..13): 15  "capture"
 *   CAPTURE_DEFENDED  + 15 if the opponent attacks the destination once the move is made
 *             (the mover lifted from its square, so x-rays count): 30 classes  "capture-defended"
 *   CHECK     + 30 if the move gives check (direct or discovered): 60          "capture-defended-check"
 *   ESCAPE    + 60 if the opponent attacks the mover's square before the move
 *             (drops: never): 120 classes                                      "capture-defended-check-escape"
 *   MOVER     + 120 times the kind of the piece that moves, before any promotion (board
 *             kinds 0..13; a drop: the dropped kind): 1680 classes    "capture-defended-check-escape-mover"
 *             (label = the ESCAPE label + 262,440 kind: ModelConfig.move_kinds = 14)
 *   SUPPORTED + 1680 if another of our pieces attacks the destination once the move is
 *             made (x-rays through the mover count): 3360 classes
 *             "capture-defended-check-escape-mover-supported" (move_kinds = 28: the kind is
 *             the mover + 14 supported)
 * The dlshogi label is label % MK_SHOGI_NUM_LABELS. A position's moves keep distinct labels
 * and the producers' slot order (ascending dlshogi label). */
enum { MK_SHOGI_MOVES_DLSHOGI = 0, MK_SHOGI_MOVES_CAPTURE = 1, MK_SHOGI_MOVES_CAPTURE_DEFENDED = 2,
       MK_SHOGI_MOVES_CHECK = 3, MK_SHOGI_MOVES_ESCAPE = 4, MK_SHOGI_MOVES_MOVER = 5,
       MK_SHOGI_MOVES_SUPPORTED = 6, MK_SHOGI_MOVE_ENCODINGS = 7 };
/* Labels of an encoding (0 for an unknown encoding). */
int mk_shogi_num_labels(int encoding);
/* Rewrites n dlshogi labels of the boards' legal moves into `encoding`'s labels, in place. */
void mk_shogi_encode_labels_boards(const mk_shogi_boards *boards, int encoding, int32_t *labels, int n);
/* mk_shogi_legal_moves_labels with labels in `encoding` (pos must be valid). */
int mk_shogi_legal_moves_encoded(const mk_shogi_pos *pos, int encoding, uint16_t *moves, int32_t *labels);

#endif
