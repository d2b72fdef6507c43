/* What every game's binding of record files shares (records_binding.c): the record files
 * of csrc/data/record_source.h from Python lists of arrays, the mapping of a file, and the
 * row source capsule (python/common/row_source_capsule.h). */
#ifndef MANAKA_RECORDS_BINDING_H
#define MANAKA_RECORDS_BINDING_H

#include "python/common/binding.h"

#include "data/record_source.h"

/* *files from `arrays` (a list of C-contiguous uint8 [n, record_bytes] arrays, read in place
 * by the producers: the caller keeps the list alive) and `names` (a list of str as long):
 * 0, or -1 with an exception whose message starts with `who`. */
int mk_record_files_arg(mk_record_files *files, const mk_record_game *game, PyObject *arrays,
                        PyObject *names, int skip, const char *who);

/* (records uint8 [n, record_bytes] read-only, file size in bytes): the file's whole records
 * memory-mapped (mk_map_records), unmapped when the array goes; NULL with an OSError, or a
 * ValueError "<who>: <path> is not a regular file". `path` is a bytes object. */
PyObject *mk_map_records_value(PyObject *path, int64_t record_bytes, const char *who);

/* A new row source capsule for `source`, which `owner` owns: the capsule holds a reference
 * to owner. */
PyObject *mk_row_source_capsule(PyObject *owner, const mk_row_source *source);

#endif
