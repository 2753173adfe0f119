/*
 * profview export kernel: format Chrome-trace event rows (chrome_trace.py's `format_rows`; its
 * numpy version is the reference and fallback, byte for byte).
 *
 * Why C: at 5e6 events the numpy version builds an (n, 18) digit matrix with strided writes and
 * stacks it per row head (~2 s); this loop writes each row once, with the GIL released.
 *
 * A row is   head[key] + ts + mid + dur + tail   (mid and dur only when durations are given),
 * where ts and dur are nanosecond counts written as microsecond decimals on a 1/1024 µs grid
 * (see grid_decimal); any int64 value fits (ts_width / dur_width must be at least 28).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../int64_buffer.h"

/* Times are written on a binary grid: k / 1024 µs (k an integer, ~0.98 ns steps), so that a
 * reader's float64 arithmetic on them is exact (every value < 2^43 µs is a double, and so are
 * their sums and differences): ts + dur of one event equals the next event's ts exactly when the
 * nanosecond times were equal, so viewers never see adjacent or nested spans overlap. The end of
 * an event is rounded to the grid and its duration derived from the rounded start and end.
 * A time is split into a floor integer part (µs) and a fraction in 1024ths, without overflow for
 * any int64 nanosecond value. */
#define GRID_WIDTH 28                               /* the longest value: "-" + 16 digits + "." + 10 */
#define GRID_R(r) (((r) * 128 + 62) / 125)        /* r in [0, 250): 1024ths of r ns / 1000 rounded */

static inline int64_t floor_div(int64_t a, int64_t b, int64_t *rem)
{
    int64_t q = a / b, r = a % b;
    if (r < 0) {
        r += b;
        q -= 1;
    }
    *rem = r;
    return q;
}

/* ns -> (q, r): ns = 125 q + r, 0 <= r < 125 */
static inline void split125(int64_t ns, int64_t *q, int64_t *r) { *q = floor_div(ns, 125, r); }

/* (q, r) with r in [0, 250) -> integer µs part and fraction in 1024ths */
static inline void grid_parts(int64_t q, int64_t r, int64_t *ip, int64_t *frac)
{
    if (r >= 125) {
        r -= 125;
        q += 1;
    }
    int64_t b;
    int64_t a = floor_div(q, 8, &b);
    int64_t f = 128 * b + GRID_R(r);
    *ip = a + f / 1024;
    *frac = f % 1024;
}

/* Write the value ip + frac / 1024 as "[-]u.ddd[ddddddd]" (at least 3 decimals, trailing zeros
 * dropped) at out; returns its length (at most 28). */
static inline int grid_decimal(char *out, int64_t ip, int64_t frac)
{
    char digits[40];
    char *end = digits + sizeof digits, *p = end;
    int neg = ip < 0;
    uint64_t whole, part;
    if (neg) {
        whole = frac ? (uint64_t)(-(ip + 1)) : (uint64_t)0 - (uint64_t)ip;
        part = frac ? (uint64_t)(1024 - frac) : 0;
    } else {
        whole = (uint64_t)ip;
        part = (uint64_t)frac;
    }
    uint64_t f = part * 9765625u;                  /* 10 decimal digits of part / 1024 */
    int keep = 10;
    while (keep > 3 && f % 10 == 0) {
        f /= 10;
        keep--;
    }
    for (int i = 0; i < keep; i++) {
        *--p = (char)('0' + f % 10);
        f /= 10;
    }
    *--p = '.';
    do {
        *--p = (char)('0' + whole % 10);
        whole /= 10;
    } while (whole);
    if (neg)
        *--p = '-';
    int len = (int)(end - p);
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
        || n_heads < 0 || ts_width < GRID_WIDTH || dur_width < GRID_WIDTH) {
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
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = start; r < end; r++) {
        int64_t i = ord ? ord[r] : r, k = keys[i];
        memcpy(w, heads + offs[k], (size_t)(offs[k + 1] - offs[k]));
        w += offs[k + 1] - offs[k];
        int64_t q1, r1, ip, frac;
        split125(tss[i], &q1, &r1);
        grid_parts(q1, r1, &ip, &frac);
        w += grid_decimal(w, ip, frac);
        if (durs) {
            int64_t q2, r2, eip, efrac;
            split125(durs[i], &q2, &r2);
            grid_parts(q1 + q2, r1 + r2, &eip, &efrac);   /* the rounded end; dur = end - start */
            int64_t dip = eip - ip, dfrac = efrac - frac;
            if (dfrac < 0) {
                dfrac += 1024;
                dip -= 1;
            }
            memcpy(w, mid, (size_t)mid_len);
            w += mid_len;
            w += grid_decimal(w, dip, dfrac);
        }
        memcpy(w, tail, (size_t)tail_len);
        w += tail_len;
    }
    Py_END_ALLOW_THREADS
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
