/* Record files from Python, for any game: map_records, and _core.GameRecords, the row source
 * over a game's record files (csrc/data/record_source.h) that the game hands over as a
 * capsule (python/common/row_source_capsule.h): shogi's from _core.shogi_game, the toy game's
 * from manaka._testing. */
#include "python/common/binding.h"

#include <errno.h>
#include <stdlib.h>

#include "data/record_source.h"
#include "python/common/row_source_capsule.h"

static const char OP[] = "GameRecords";

/* *rf from `arrays` (a list of C-contiguous uint8 [n, record_bytes] arrays, read in place by
 * the producers: the caller keeps the list alive) and `names` (a list of str as long): 0,
 * or -1 with an exception. */
static int record_files_arg(mk_record_files *rf, const mk_record_game *game, PyObject *arrays,
                            PyObject *names, int skip) {
    Py_ssize_t n = PyList_GET_SIZE(arrays);
    if (n < 1 || n != PyList_GET_SIZE(names) || n > 1 << 20) {
        PyErr_Format(PyExc_ValueError, "%s: files and names must be equal, non-empty lists", OP);
        return -1;
    }
    const uint8_t **data = calloc((size_t)n, sizeof *data);
    int64_t *records = calloc((size_t)n, sizeof *records);
    const char **text = calloc((size_t)n, sizeof *text);
    int ok = data && records && text;
    if (!ok) PyErr_NoMemory();
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *a = PyList_GET_ITEM(arrays, i), *name = PyList_GET_ITEM(names, i);
        /* Read in place by the producers: exactly uint8 [rows, width], C-contiguous. */
        if (!PyArray_Check(a) || PyArray_TYPE((PyArrayObject *)a) != NPY_UINT8 ||
            PyArray_NDIM((PyArrayObject *)a) != 2 ||
            PyArray_DIM((PyArrayObject *)a, 1) != game->record_bytes ||
            !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)a)) {
            PyErr_Format(PyExc_ValueError, "%s: files[%zd] must be a C-contiguous uint8 [n, %lld] array", OP, i,
                         (long long)game->record_bytes);
            ok = 0;
            break;
        }
        text[i] = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        if (!text[i]) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s: names[%zd] must be a str", OP, i);
            ok = 0;
            break;
        }
        data[i] = PyArray_DATA((PyArrayObject *)a);
        records[i] = PyArray_DIM((PyArrayObject *)a, 0);
    }
    if (ok) {
        mk_status status = mk_record_files_init(rf, game, (int)n, data, records, text, skip);
        if (status != MK_OK) {
            mk_raise_where(OP, status);
            ok = 0;
        }
    }
    free(data);
    free(records);
    free(text);
    return ok ? 0 : -1;
}

#define MAPPING_NAME "manaka.record_mapping"

static void mapping_free(PyObject *capsule) {
    mk_record_map *m = PyCapsule_GetPointer(capsule, MAPPING_NAME);
    if (!m) return;
    mk_unmap_records(m);
    free(m);
}

/* map_records(path, record_bytes, who="map_records") -> (records uint8 [n, record_bytes]
 * read-only, file size in bytes): any game's fixed-width records, the file's whole records
 * memory-mapped (mk_map_records), unmapped when the array goes. Errors start with `who` (a
 * game's name: "shogi"): an OSError, or a ValueError "<who>: <path> is not a regular file". */
static PyObject *map_file(const char *path, int64_t width, const char *who) {
    mk_record_map map;
    int err;
    Py_BEGIN_ALLOW_THREADS;
    err = mk_map_records(path, width, &map);
    Py_END_ALLOW_THREADS;
    if (err > 0) {
        errno = err;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    if (err < 0) return PyErr_Format(PyExc_ValueError, "%s: %s is not a regular file", who, path);
    npy_intp dims[2] = {(npy_intp)(map.len / (size_t)width), (npy_intp)width};
    PyObject *arr;
    if (map.len) {
        mk_record_map *kept = malloc(sizeof *kept);
        if (!kept) {
            mk_unmap_records(&map);
            return PyErr_NoMemory();
        }
        *kept = map;
        PyObject *owner = PyCapsule_New(kept, MAPPING_NAME, mapping_free);
        if (!owner) {
            mk_unmap_records(kept);
            free(kept);
            return NULL;
        }
        arr = mk_array_view(2, dims, NPY_UINT8, map.addr, owner);
        Py_DECREF(owner);
    } else {
        arr = PyArray_SimpleNew(2, dims, NPY_UINT8);
    }
    if (!arr) return NULL;
    PyArray_CLEARFLAGS((PyArrayObject *)arr, NPY_ARRAY_WRITEABLE); /* PROT_READ: a write would fault */
    return Py_BuildValue("NL", arr, (long long)map.size);
}

static PyObject *py_map_records(PyObject *self, PyObject *args) {
    PyObject *path;
    long long width;
    const char *who = "map_records";
    if (!PyArg_ParseTuple(args, "O&L|s", PyUnicode_FSConverter, &path, &width, &who)) return NULL;
    PyObject *out = NULL;
    if (width < 1 || width > 1 << 20)
        PyErr_Format(PyExc_ValueError, "%s: record_bytes must be in [1, 2^20], got %lld", who, width);
    else
        out = map_file(PyBytes_AS_STRING(path), width, who);
    Py_DECREF(path);
    return out;
}


/* _core.GameRecords(game, files, names, skip): the record files of any game as a row source
 * for the Loader; game a MK_RECORD_GAME_CAPSULE capsule (row_source_capsule.h), files and
 * names as record_files_arg's. len() is the number of rows, locate(row) -> (file, record
 * index, variant). */
typedef struct {
    PyObject_HEAD
    mk_record_files files;
    mk_row_source source;
    PyObject *game;   /* the game's capsule, kept alive: files.game.ctx and its functions */
    PyObject *arrays; /* the record arrays, kept alive: the producers read them in place */
} GameRecordsObject;

static void GameRecords_dealloc(GameRecordsObject *self) {
    mk_record_files_free(&self->files);
    Py_XDECREF(self->game);
    Py_XDECREF(self->arrays);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int GameRecords_init(GameRecordsObject *self, PyObject *args, PyObject *kwds) {
    PyObject *game, *files, *names;
    int skip;
    if (self->arrays) {
        PyErr_SetString(PyExc_RuntimeError, "GameRecords: already initialised");
        return -1;
    }
    mk_record_files_free(&self->files); /* what a failed earlier __init__ left */
    if (!PyArg_ParseTuple(args, "OO!O!p", &game, &PyList_Type, &files, &PyList_Type, &names, &skip))
        return -1;
    const mk_record_game *g = PyCapsule_IsValid(game, MK_RECORD_GAME_CAPSULE)
                                  ? PyCapsule_GetPointer(game, MK_RECORD_GAME_CAPSULE)
                                  : NULL;
    if (!g) {
        PyErr_Format(PyExc_TypeError, "GameRecords: game must be a %s capsule, got %s",
                     MK_RECORD_GAME_CAPSULE, Py_TYPE(game)->tp_name);
        return -1;
    }
    if (record_files_arg(&self->files, g, files, names, skip) < 0) return -1;
    self->source = mk_record_row_source(&self->files);
    Py_XSETREF(self->game, Py_NewRef(game));
    self->arrays = Py_NewRef(files);
    return 0;
}

static PyObject *GameRecords_capsule(GameRecordsObject *self, void *closure) {
    MK_REQUIRE(self->arrays, "GameRecords", NULL);
    return mk_owned_capsule(&self->source, MK_ROW_SOURCE_CAPSULE, (PyObject *)self);
}

static PyObject *GameRecords_locate(GameRecordsObject *self, PyObject *args) {
    long long row;
    MK_REQUIRE(self->arrays, "GameRecords", NULL);
    if (!PyArg_ParseTuple(args, "L", &row)) return NULL;
    if (row < 0 || row >= self->source.num_rows)
        return PyErr_Format(PyExc_IndexError, "GameRecords: row %lld is out of range for %lld rows", row,
                            (long long)self->source.num_rows);
    int file, variant;
    int64_t index;
    mk_record_locate(&self->files, row, &file, &index, &variant);
    return Py_BuildValue("iLi", file, (long long)index, variant);
}

static Py_ssize_t GameRecords_len(GameRecordsObject *self) { return (Py_ssize_t)self->source.num_rows; }

static PySequenceMethods GameRecords_sequence = {.sq_length = (lenfunc)GameRecords_len};

static PyGetSetDef GameRecords_getset[] = {
    {MK_ROW_SOURCE_ATTRIBUTE, (getter)GameRecords_capsule, NULL,
     "the rows as a row source capsule for the Loader (python/common/row_source_capsule.h)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef GameRecords_methods[] = {
    {"locate", (PyCFunction)GameRecords_locate, METH_VARARGS,
     "locate(row) -> (file, record index, variant)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GameRecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka._core.GameRecords",
    .tp_basicsize = sizeof(GameRecordsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "GameRecords(game, files, names, skip): any game's record files as a Loader row source.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)GameRecords_init,
    .tp_dealloc = (destructor)GameRecords_dealloc,
    .tp_as_sequence = &GameRecords_sequence,
    .tp_getset = GameRecords_getset,
    .tp_methods = GameRecords_methods,
};

static PyMethodDef records_methods[] = {
    {"map_records", py_map_records, METH_VARARGS,
     "map_records(path, record_bytes, who='map_records') -> (records uint8 [n, record_bytes] read-only, size): "
     "memory-mapped, no file descriptor kept"},
    {NULL, NULL, 0, NULL},
};

int mk_init_records(PyObject *module) {
    if (PyModule_AddFunctions(module, records_methods) < 0 || PyType_Ready(&GameRecordsType) < 0) return -1;
    return PyModule_AddObjectRef(module, "GameRecords", (PyObject *)&GameRecordsType);
}
