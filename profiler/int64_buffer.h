/*
 * Shared by profview's analysis extensions: borrow a contiguous int64 array (numpy or any buffer).
 */
#ifndef PROFVIEW_INT64_BUFFER_H
#define PROFVIEW_INT64_BUFFER_H
#include <Python.h>
#include <string.h>

static int get_int64_buffer(PyObject *obj, Py_buffer *view, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || strchr("ql", view->format[strlen(view->format) - 1]) == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous int64 array", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#endif
