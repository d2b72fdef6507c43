/* hcpe3 games: see hcpe3.h.
 *
 * The scan replays each game from its header's position with mk_shogi_apply_move (which
 * refuses a move that is not legal), so a record's position is stored once, as the HCPE
 * record the producers already decode (records.h: mk_shogi_row), and the producers never
 * replay a game: a record is read at random like an HCPE record, plus its candidate list
 * for the soft target. */
#include "hcpe3.h"

#include <string.h>

#include "move_apply.h"

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Fault `code` at (record r, game g, ply p). */
static void set_fault(mk_hcpe3_fault *f, int code, int64_t r, int64_t g, int64_t p) {
    f->code = code, f->record = r, f->game = g, f->ply = p;
}

/* The record's checks: the selected move and every candidate legal, visits above 0. */
static int check_record(const mk_shogi_pos *pos, const uint8_t *info, int candidates) {
    uint16_t moves[MK_SHOGI_MAX_MOVES];
    int n = mk_shogi_legal_moves(pos, moves);
    uint16_t selected = u16(info);
    int found = 0;
    for (int i = 0; i < n && !found; i++) found = moves[i] == selected;
    if (!found) return MK_HCPE3_SELECTED_NOT_LEGAL;
    uint64_t visits = 0;
    for (int c = 0; c < candidates; c++) {
        const uint8_t *v = info + MK_HCPE3_INFO_BYTES + MK_HCPE3_VISIT_BYTES * c;
        uint16_t move = u16(v);
        found = 0;
        for (int i = 0; i < n && !found; i++) found = moves[i] == move;
        if (!found) return MK_HCPE3_CANDIDATE_NOT_LEGAL;
        visits += u16(v + 2);
    }
    return visits ? MK_SHOGI_OK : MK_HCPE3_NO_VISITS;
}

int64_t mk_hcpe3_scan(const uint8_t *data, int64_t size, int skip, int64_t capacity, uint8_t *hcpe,
                      int64_t *info, int64_t *game, int32_t *ply, int64_t *skipped, mk_hcpe3_fault *fault) {
    int64_t at = 0, r = 0, out = 0;
    *skipped = 0;
    set_fault(fault, MK_SHOGI_OK, 0, 0, 0);
    for (int64_t g = 0; at < size; g++) {
        int64_t game_out = out; /* the game's first record written, for a game cut short */
        int64_t p = 0;
        int cut = size - at < MK_HCPE3_HEADER_BYTES;
        int status = MK_SHOGI_OK; /* once set, it spoils the rest of the game */
        mk_shogi_pos pos;
        uint8_t result = 0;
        int moves = 0;
        if (!cut) {
            const uint8_t *h = data + at;
            uint8_t start[MK_HCPE_BYTES] = {0};
            memcpy(start, h, 32);
            mk_shogi_record decoded;
            status = mk_shogi_decode(MK_SHOGI_FORMAT_HCPE, start, &decoded);
            pos = decoded.pos;
            moves = u16(h + 32);
            result = h[34] & 3; /* the higher bits say how the game ended */
            if (status == MK_SHOGI_OK && result == 3) status = MK_SHOGI_BAD_RESULT;
            at += MK_HCPE3_HEADER_BYTES;
        }
        for (; !cut && p < moves; p++) {
            if (size - at < MK_HCPE3_INFO_BYTES) {
                cut = 1;
                break;
            }
            const uint8_t *inf = data + at;
            int candidates = u16(inf + 4);
            int64_t bytes = MK_HCPE3_INFO_BYTES + (int64_t)MK_HCPE3_VISIT_BYTES * candidates;
            if (size - at < bytes) {
                cut = 1;
                break;
            }
            if (candidates > 0) {
                int code = status != MK_SHOGI_OK ? status : check_record(&pos, inf, candidates);
                if (code == MK_SHOGI_OK && out < capacity) {
                    uint8_t *rec = hcpe + MK_HCPE_BYTES * out;
                    code = mk_shogi_encode_hcp(&pos, rec);
                    memcpy(rec + 32, inf + 2, 2); /* eval, side to move */
                    memcpy(rec + 34, inf, 2);     /* the selected move */
                    rec[36] = result, rec[37] = 0;
                    info[out] = at, game[out] = g, ply[out] = (int32_t)p;
                }
                if (code == MK_SHOGI_OK && out < capacity) {
                    out++;
                } else if (code == MK_SHOGI_OK) { /* more records than the count said */
                    set_fault(fault, MK_HCPE3_CUT_SHORT, r, g, p);
                    return -1;
                } else if (skip) {
                    ++*skipped;
                } else {
                    set_fault(fault, code, r, g, p);
                    return -1;
                }
                r++;
            }
            if (status == MK_SHOGI_OK && mk_shogi_apply_move(&pos, u16(inf), &pos) != MK_SHOGI_OK)
                status = MK_HCPE3_SELECTED_NOT_LEGAL;
            at += bytes;
        }
        if (cut) {
            if (!skip) {
                set_fault(fault, MK_HCPE3_CUT_SHORT, r, g, p);
                return -1;
            }
            *skipped += out - game_out;
            out = game_out;
            break;
        }
    }
    return out;
}

int64_t mk_hcpe3_count(const uint8_t *data, int64_t size) {
    int64_t at = 0, n = 0;
    while (size - at >= MK_HCPE3_HEADER_BYTES) {
        int moves = u16(data + at + 32);
        at += MK_HCPE3_HEADER_BYTES;
        for (int p = 0; p < moves && size - at >= MK_HCPE3_INFO_BYTES; p++) {
            int candidates = u16(data + at + 4);
            n += candidates > 0;
            at += MK_HCPE3_INFO_BYTES + (int64_t)MK_HCPE3_VISIT_BYTES * candidates;
        }
    }
    return n;
}

int mk_hcpe3_policy(const uint8_t *info, int64_t available, int side, const int32_t *labels, int n,
                    float *policy) {
    if (available < MK_HCPE3_INFO_BYTES) return MK_HCPE3_CUT_SHORT;
    int candidates = u16(info + 4);
    if (available < MK_HCPE3_INFO_BYTES + (int64_t)MK_HCPE3_VISIT_BYTES * candidates) return MK_HCPE3_CUT_SHORT;
    double visits[MK_SHOGI_MAX_MOVES] = {0}; /* exact sums: each below 2^53 */
    if (n > MK_SHOGI_MAX_MOVES) return MK_HCPE3_CANDIDATE_NOT_LEGAL;
    uint64_t total = 0;
    for (int c = 0; c < candidates; c++) {
        const uint8_t *v = info + MK_HCPE3_INFO_BYTES + MK_HCPE3_VISIT_BYTES * c;
        int label = mk_shogi_label(u16(v), side), lo = 0, hi = n - 1;
        while (lo < hi) { /* the first label >= label (dlshogi labels ascend) */
            int mid = (lo + hi) / 2;
            if (labels[mid] % MK_SHOGI_NUM_LABELS < label) lo = mid + 1;
            else hi = mid;
        }
        if (n == 0 || labels[lo] % MK_SHOGI_NUM_LABELS != label) return MK_HCPE3_CANDIDATE_NOT_LEGAL;
        visits[lo] += u16(v + 2); /* a move listed twice: its visits add up */
        total += u16(v + 2);
    }
    if (!total) return MK_HCPE3_NO_VISITS;
    for (int l = 0; l < n; l++) policy[l] = (float)(visits[l] / (double)total);
    return MK_SHOGI_OK;
}

int64_t mk_hcpe3_policy_rows(const uint8_t *data, int64_t size, const int64_t *info,
                             const uint8_t *side, const int32_t *labels, const int64_t *offsets,
                             int64_t n, int64_t total, float *policy, int32_t *status) {
    if (offsets[0] != 0 || offsets[n] != total) return -1;
    for (int64_t i = 0; i < n; i++)
        if (offsets[i + 1] < offsets[i] || offsets[i + 1] - offsets[i] > MK_SHOGI_MAX_MOVES ||
            info[i] < 0 || info[i] >= size)
            return i;
    for (int64_t i = 0; i < n; i++) {
        int k = (int)(offsets[i + 1] - offsets[i]);
        float *p = policy + offsets[i];
        status[i] = mk_hcpe3_policy(data + info[i], size - info[i], side[i] & 1, labels + offsets[i], k, p);
        if (status[i])
            for (int l = 0; l < k; l++) p[l] = 0.0f;
    }
    return n;
}

const char *mk_hcpe3_reason(int code) {
    switch (code) {
    case MK_HCPE3_CUT_SHORT: return "the game is cut short (the file ends inside it)";
    case MK_HCPE3_CANDIDATE_NOT_LEGAL: return "a candidate move is not legal in the position";
    case MK_HCPE3_NO_VISITS: return "the candidate moves have no visits";
    case MK_HCPE3_SELECTED_NOT_LEGAL: return "the selected move is not legal in the position";
    default: return mk_shogi_record_reason(code);
    }
}
