/*
 * profview export kernel: format Chrome-trace event rows (chrome_trace.py's `format_rows`; its
 * numpy version is the reference and fallback, byte for byte).
 *
 * Why C: at 5e6 events the numpy version builds an (n, 18) digit matrix with strided writes and
 * stacks it per row head (~2 s); this loop writes each row once, with the GIL released.
 *
 * A row is   head[key] + ts + mid + dur + tail   (mid and dur only when durations are given),
 * where ts and dur are nanosecond counts written as microsecond decimals with three fraction
 * digits ("[-]u.nnn", at most ts_width / dur_width characters).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../int64_buffer.h"

/* Write v ns as "[-]u.nnn" at out; returns its length, 0 when it is longer than width. */
static inline int compact_decimal(char *out, int64_t v, int width)
{
    char digits[32];
    char *end = digits + sizeof digits, *p = end;
    uint64_t rest = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    for (int i = 0; i < 3; i++) {
        *--p = (char)('0' + rest % 10);
        rest /= 10;
    }
    *--p = '.';
    do {
        *--p = (char)('0' + rest % 10);
        rest /= 10;
    } while (rest);
    if (v < 0)
        *--p = '-';
    int len = (int)(end - p);
    if (len > width)
        return 0;
    memcpy(out, p, (size_t)len);
    return len;
}

/* format_rows(out, heads, head_offsets, key, ts, dur_or_None, order_or_None, start, stop,
 *             ts_width, dur_width, mid, tail) -> (next_row, n_bytes)
 * Formats rows order[start:stop] (or start:stop) into the writable buffer `out` while they fit
 * at their longest (numbers at full width); returns the first row not written and the bytes
 * written. The caller reuses one buffer for a whole trace: a fresh 100 MB bytes object per call
 * cost more in page faults than the formatting. */
static PyObject *format_rows(PyObject *self, PyObject *args)
{
    PyObject *o_out, *o_off, *o_key, *o_ts, *o_dur, *o_order;
    const char *heads, *mid, *tail;
    Py_ssize_t heads_len, mid_len, tail_len, start, stop;
    int ts_width, dur_width;
    if (!PyArg_ParseTuple(args, "Oy#OOOOOnniiy#y#", &o_out, &heads, &heads_len, &o_off, &o_key, &o_ts, &o_dur,
                          &o_order, &start, &stop, &ts_width, &dur_width, &mid, &mid_len, &tail, &tail_len))
        return NULL;
    Py_buffer out = {0}, off = {0}, key = {0}, ts = {0}, dur = {0}, order = {0};
    int has_dur = o_dur != Py_None, has_order = o_order != Py_None;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(o_out, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (get_int64_buffer(o_off, &off, "head_offsets") < 0)
        goto release;
    if (get_int64_buffer(o_key, &key, "key") < 0)
        goto release;
    if (get_int64_buffer(o_ts, &ts, "ts") < 0)
        goto release;
    if (has_dur && get_int64_buffer(o_dur, &dur, "dur") < 0)
        goto release;
    if (has_order && get_int64_buffer(o_order, &order, "order") < 0)
        goto release;
    const Py_ssize_t n = key.len / 8, n_heads = off.len / 8 - 1;
    const int64_t *offs = off.buf, *keys = key.buf, *tss = ts.buf, *durs = has_dur ? dur.buf : NULL;
    const int64_t *ord = has_order ? order.buf : NULL;
    const Py_ssize_t n_rows = has_order ? order.len / 8 : n;
    if (ts.len / 8 != n || (has_dur && dur.len / 8 != n) || start < 0 || stop > n_rows || start > stop
        || n_heads < 0 || ts_width < 5 || dur_width < 5) {
        PyErr_SetString(PyExc_ValueError, "inconsistent row arrays or range");
        goto release;
    }
    for (Py_ssize_t h = 0; h <= n_heads; h++) {
        if (offs[h] < 0 || offs[h] > heads_len || (h && offs[h] < offs[h - 1])) {
            PyErr_SetString(PyExc_ValueError, "head offsets out of range");
            goto release;
        }
    }
    /* how many rows fit, checking every index on the way */
    const Py_ssize_t fixed = ts_width + (has_dur ? mid_len + dur_width : 0) + tail_len;
    Py_ssize_t total = 0, end = start;
    for (; end < stop; end++) {
        int64_t i = ord ? ord[end] : end;
        if (i < 0 || i >= n || keys[i] < 0 || keys[i] >= n_heads) {
            PyErr_SetString(PyExc_IndexError, "row index or head key out of range");
            goto release;
        }
        Py_ssize_t row = offs[keys[i] + 1] - offs[keys[i]] + fixed;
        if (total + row > out.len)
            break;
        total += row;
    }
    if (end == start && start < stop) {
        PyErr_SetString(PyExc_ValueError, "the output buffer is smaller than one row");
        goto release;
    }
    char *w = out.buf;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = start; r < end && ok; r++) {
        int64_t i = ord ? ord[r] : r, k = keys[i];
        memcpy(w, heads + offs[k], (size_t)(offs[k + 1] - offs[k]));
        w += offs[k + 1] - offs[k];
        int len = compact_decimal(w, tss[i], ts_width);
        ok &= len > 0;
        w += len;
        if (durs) {
            memcpy(w, mid, (size_t)mid_len);
            w += mid_len;
            len = compact_decimal(w, durs[i], dur_width);
            ok &= len > 0;
            w += len;
        }
        memcpy(w, tail, (size_t)tail_len);
        w += tail_len;
    }
    Py_END_ALLOW_THREADS
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "a time does not fit the trace's fixed-width field");
    else
        result = Py_BuildValue("nn", end, (Py_ssize_t)(w - (char *)out.buf));
release:                                    /* PyBuffer_Release is a no-op for buffers never taken */
    PyBuffer_Release(&out);
    PyBuffer_Release(&off);
    PyBuffer_Release(&key);
    PyBuffer_Release(&ts);
    PyBuffer_Release(&dur);
    PyBuffer_Release(&order);
    return result;
}

static PyMethodDef methods[] = {
    {"format_rows", format_rows, METH_VARARGS,
     "format_rows(out, heads, head_offsets, key, ts, dur, order, start, stop, ts_width, dur_width, mid, tail)"
     " -> (next_row, n_bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_trace_rows", "Chrome-trace row kernel (see chrome_trace.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__trace_rows(void) { return PyModule_Create(&module); }
