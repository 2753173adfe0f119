/*
 * profview kernel: the smallest and largest value of every column of an int64 table, in one pass
 * over its rows (columns.py's `ranges`; its numpy version is the reference and fallback).
 *
 * Why C: the raw store's reader checks every records chunk's codes and times ((n, 2) or (n, 4)
 * int64 rows, views of the memory-mapped file); numpy reduces a strided column in a pass of its
 * own, reading every row again for each column and each of min and max.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../int64_buffer.h"

/* ranges(table, width) -> (mins, maxs) as tuples of `width` ints; None for a table without rows */
static PyObject *ranges(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "On", &obj, &width))
        return NULL;
    if (width < 1 || width > 16) {
        PyErr_SetString(PyExc_ValueError, "width must be 1 to 16 columns");
        return NULL;
    }
    Py_buffer view;
    if (get_int64_buffer(obj, &view, "table") < 0)
        return NULL;
    const int64_t *v = view.buf;
    const Py_ssize_t n = view.len / 8 / width;
    if (n * width * 8 != view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the table is not a whole number of rows");
        return NULL;
    }
    if (n == 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    int64_t lo[16], hi[16];
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < width; k++)
        lo[k] = hi[k] = v[k];
    for (Py_ssize_t r = 1; r < n; r++) {
        const int64_t *row = v + r * width;
        for (Py_ssize_t k = 0; k < width; k++) {
            if (row[k] < lo[k])
                lo[k] = row[k];
            if (row[k] > hi[k])
                hi[k] = row[k];
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *mins = PyTuple_New(width), *maxs = PyTuple_New(width);
    for (Py_ssize_t k = 0; mins && maxs && k < width; k++) {
        PyTuple_SET_ITEM(mins, k, PyLong_FromLongLong(lo[k]));
        PyTuple_SET_ITEM(maxs, k, PyLong_FromLongLong(hi[k]));
    }
    PyObject *result = (mins && maxs && !PyErr_Occurred()) ? PyTuple_Pack(2, mins, maxs) : NULL;
    Py_XDECREF(mins);
    Py_XDECREF(maxs);
    return result;
}

static PyMethodDef methods[] = {
    {"ranges", ranges, METH_VARARGS, "ranges(table, width) -> (mins, maxs) of each column, or None without rows."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns", "Column ranges kernel (see columns.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
