/* How rows cross between extensions as capsules, so that the Loader's binding names no game
 * and a game may live in any extension (manaka._testing's toy game is one).
 *
 * A row source (csrc/data/loader.h, mk_row_source) reaches manaka._core.Loader as a
 * PyCapsule named MK_ROW_SOURCE_CAPSULE whose pointer is the const mk_row_source *, valid
 * while the capsule lives (the capsule keeps what owns the source alive). A Python object
 * offers its rows by an attribute `_row_source_capsule` that gives such a capsule; the
 * Loader binding keeps the capsule for the loader's life.
 *
 * A game (csrc/data/record_source.h, mk_record_game) reaches manaka._core.GameRecords, the
 * record files of any game, as a PyCapsule named MK_RECORD_GAME_CAPSULE whose pointer is the
 * const mk_record_game *, valid (its ctx and functions included) while the capsule lives;
 * GameRecords keeps the capsule. */
#ifndef MANAKA_ROW_SOURCE_CAPSULE_H
#define MANAKA_ROW_SOURCE_CAPSULE_H

#define MK_ROW_SOURCE_CAPSULE "manaka.row_source"
#define MK_ROW_SOURCE_ATTRIBUTE "_row_source_capsule"
#define MK_RECORD_GAME_CAPSULE "manaka.record_game"

#endif
