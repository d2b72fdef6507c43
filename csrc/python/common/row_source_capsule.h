/* How a row source (csrc/data/loader.h, mk_row_source) reaches manaka._core.Loader from any
 * extension: a PyCapsule named MK_ROW_SOURCE_CAPSULE whose pointer is the const
 * mk_row_source *, valid while the capsule lives (the capsule keeps what owns the source
 * alive). A Python object offers its rows by an attribute `_row_source_capsule` that gives
 * such a capsule; the Loader binding keeps the capsule for the loader's life. So the
 * loader binding names no game, and a game or a test hook in another extension
 * (manaka._testing's) feeds the same producers. */
#ifndef MANAKA_ROW_SOURCE_CAPSULE_H
#define MANAKA_ROW_SOURCE_CAPSULE_H

#define MK_ROW_SOURCE_CAPSULE "manaka.row_source"
#define MK_ROW_SOURCE_ATTRIBUTE "_row_source_capsule"

#endif
