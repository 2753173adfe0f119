/*
 * profview analysis kernel: pair span begin / end events straight from the raw store's events
 * chunks, and write the op and span rows with their labels, nesting level and self time, in two
 * linear passes (nesting.py's `nest_events`; its numpy version is the reference and fallback).
 *
 * Why C: at 1e7 events the numpy version builds a dozen full-length arrays (per-event thread,
 * window, lane, sort order, gathers) and sorts them; fresh memory is what that costs most. This
 * walk reads the chunks where they are (views of the memory-mapped files) and allocates only its
 * output rows, with the GIL released.
 *
 * Input: the events chunks ((n, 2) int64: time, code), and segments (chunk, first event, length,
 * thread index) giving the order to visit them in: each thread's events together, in recording
 * order. An event is a span event when code_class[code] is 1 (op) or 2 (other span), and belongs
 * to the latest window [start, stop] starting at or before its time; events outside every window
 * are not data (counted). Lanes are (thread, window), and the visit must meet them in order, each
 * lane's events together: when a thread's windows go back (damaged times) the kernel returns None
 * and the caller visits the events in the exact order of a stable sort by lane.
 * Semantics, identical to the numpy version:
 *   - level of a begin = depth before it, of an end = depth after it, shifted so that the lowest
 *     level of the lane is 0 (ends of spans begun before the window make depths negative);
 *   - a begin pairs with the next event at its level when that is an end of the same descriptor;
 *   - self time = duration - durations of the pairs one level deeper that finish while it is open.
 * Output: per class (ops, other spans) six columns in begin order: three labels looked up in the
 * class's tables (one by the row's thread, two by its descriptor: the codes of its categorical
 * columns, 1, 2 or 4 bytes each as the table's), start minus origin, duration, and self time (ops)
 * or level (other spans) (int64); the span events left unpaired; the events outside every window.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "../int64_buffer.h"

#define N_COLUMNS 6
#define N_LABELS 3

typedef struct {                 /* a label column: its table and the column being written */
    const char *table;
    Py_ssize_t width;            /* bytes per label: 1, 2 or 4 */
    char *out;
} Label;

typedef struct {                 /* the rows of one class, as they are written */
    PyObject *col[N_COLUMNS];    /* the labels (by thread, by descriptor, by descriptor), start, dur, last */
    Label label[N_LABELS];
    int64_t *start, *dur, *last;     /* last: self time (ops) or level (other spans) */
    Py_ssize_t n;
} Rows;

static inline void put_label(const Label *l, Py_ssize_t row, int64_t key)
{
    switch (l->width) {
    case 1:
        ((int8_t *)l->out)[row] = ((const int8_t *)l->table)[key];
        break;
    case 2:
        ((int16_t *)l->out)[row] = ((const int16_t *)l->table)[key];
        break;
    default:
        ((int32_t *)l->out)[row] = ((const int32_t *)l->table)[key];
    }
}

static Py_ssize_t column_width(const Rows *r, int k)
{
    return k < N_LABELS ? r->label[k].width : 8;
}

typedef struct {                 /* one lane's depth range, found by the first pass */
    int64_t lo, range;
} Lane;

/* What the passes read: the chunks, the segments to visit them in, the class table, the windows. */
typedef struct {
    const int64_t **chunk;                  /* each chunk's (time, code) pairs */
    const int64_t *seg_chunk, *seg_start, *seg_len, *seg_tid;
    Py_ssize_t n_seg;
    const int8_t *cls;
    Py_ssize_t n_cls;
    const int64_t *ws, *we;                 /* window starts (sorted) and stops */
    Py_ssize_t n_win;
} Input;

/* The window lookup of the last time seen: every time in [from, until) has the same latest window
 * starting at or before it (`index`, -1: none), and is inside it when t <= stop. Times mostly come
 * in order, so most lookups are two comparisons. */
typedef struct {
    int64_t from, until, stop;
    Py_ssize_t index;
} WindowCursor;

static const WindowCursor NO_WINDOW_YET = {1, 0, 0, -1};      /* an empty range: the first time seeks */

static void window_seek(const Input *in, WindowCursor *c, int64_t t)
{
    Py_ssize_t lo = 0, hi = in->n_win;          /* the first window starting after t */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (in->ws[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    c->index = lo - 1;
    c->from = lo > 0 ? in->ws[lo - 1] : INT64_MIN;
    c->until = lo < in->n_win ? in->ws[lo] : INT64_MAX;
    c->stop = lo > 0 ? in->we[lo - 1] : 0;
}

/* An event's class when it is a span event (1: op, 2: other span) inside a window, whose index goes
 * to *win; else 0, counting it in *outside when it is outside every window. */
static inline int8_t select_event(const Input *in, WindowCursor *c, const int64_t *e, Py_ssize_t *win,
                                  Py_ssize_t *outside)
{
    const int64_t t = e[0], code = e[1];
    if (t < c->from || t >= c->until)
        window_seek(in, c, t);
    if (c->index < 0 || t > c->stop) {
        (*outside)++;
        return 0;
    }
    *win = c->index;
    const int8_t klass = (code >= 0 && code < in->n_cls) ? in->cls[code] : 0;
    return (klass == 1 || klass == 2) ? klass : 0;
}

/* A walk over the span events inside a window, segment by segment: both passes walk with it, so
 * they meet the same events in the same lanes. */
typedef struct {
    const Input *in;
    WindowCursor window;
    Py_ssize_t seg;
    const int64_t *next, *end;              /* the rest of the current segment */
    int64_t tid;                            /* its thread */
    Py_ssize_t outside;                     /* events met outside every window */
} Walk;

static Walk walk_of(const Input *in)
{
    Walk w = {in, NO_WINDOW_YET, -1, NULL, NULL, 0, 0};
    return w;
}

/* The next span event (its time and code at *e, its window, its class); 0 at the end. */
static inline __attribute__((always_inline)) int next_event(Walk *w, const int64_t **e, Py_ssize_t *win,
                                                             int8_t *klass)
{
    for (;;) {
        while (w->next >= w->end) {
            const Input *in = w->in;
            if (++w->seg >= in->n_seg)
                return 0;
            w->tid = in->seg_tid[w->seg];
            w->next = in->chunk[in->seg_chunk[w->seg]] + 2 * in->seg_start[w->seg];
            w->end = w->next + 2 * in->seg_len[w->seg];
        }
        *e = w->next;
        w->next += 2;
        if ((*klass = select_event(w->in, &w->window, *e, win, &w->outside)))
            return 1;
    }
}

/* Large outputs on transparent huge pages, as numpy allocates its arrays: first-touch page faults
 * are most of the cost of fresh memory on a VM. */
static void huge_pages(char *p, Py_ssize_t n)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t page = 4096, a = ((uintptr_t)p + page - 1) & ~(page - 1), e = ((uintptr_t)p + n) & ~(page - 1);
    if (n >= (4 << 20) && e > a)
        madvise((void *)a, e - a, MADV_HUGEPAGE);
#endif
}

/* The columns of `n` rows, for labels whose tables are set. */
static int new_rows(Rows *r, Py_ssize_t n)
{
    for (int k = 0; k < N_COLUMNS; k++) {
        r->col[k] = PyByteArray_FromStringAndSize(NULL, n * column_width(r, k));
        if (!r->col[k])
            return -1;
        huge_pages(PyByteArray_AS_STRING(r->col[k]), n * column_width(r, k));
    }
    for (int k = 0; k < N_LABELS; k++)
        r->label[k].out = PyByteArray_AS_STRING(r->col[k]);
    r->start = (int64_t *)PyByteArray_AS_STRING(r->col[3]);
    r->dur = (int64_t *)PyByteArray_AS_STRING(r->col[4]);
    r->last = (int64_t *)PyByteArray_AS_STRING(r->col[5]);
    r->n = 0;
    return 0;
}

/* drop the rows of begins that never paired (duration INT64_MIN), keeping begin order */
static void compact(Rows *r, Py_ssize_t paired)
{
    if (paired == r->n)
        return;
    Py_ssize_t w = 0;
    while (r->dur[w] != INT64_MIN)
        w++;
    for (Py_ssize_t k = w + 1; k < r->n; k++) {
        if (r->dur[k] == INT64_MIN)
            continue;
        for (int j = 0; j < N_LABELS; j++)
            memcpy(r->label[j].out + w * r->label[j].width, r->label[j].out + k * r->label[j].width,
                   r->label[j].width);
        r->start[w] = r->start[k];
        r->dur[w] = r->dur[k];
        r->last[w] = r->last[k];
        w++;
    }
    r->n = w;
}

static PyObject *rows_tuple(Rows *r)
{
    for (int k = 0; k < N_COLUMNS; k++)
        if (PyByteArray_Resize(r->col[k], r->n * column_width(r, k)) < 0)
            return NULL;
    return PyTuple_Pack(N_COLUMNS, r->col[0], r->col[1], r->col[2], r->col[3], r->col[4], r->col[5]);
}

/* Pass 1: the lanes' depth ranges, the rows of each class, the span events visited and the events
 * outside every window; 0 when the lanes are out of order. */
static int measure(const Input *in, Lane **lanes, Py_ssize_t *n_lanes, Py_ssize_t *n_rows, Py_ssize_t *max_range,
                   Py_ssize_t *n_visit, Py_ssize_t *outside)
{
    Py_ssize_t cap = 0, n = 0, visit = 0, rows[2] = {0, 0}, win = -1, w_win;
    int64_t tid = 0, depth = 0, lo = 0, hi = 0;
    const int64_t *e;
    int8_t klass;
    Walk w = walk_of(in);
    while (next_event(&w, &e, &w_win, &klass)) {
        if (n == 0 || w.tid != tid || w_win != win) {
            if (n > 0) {
                if (w.tid < tid || (w.tid == tid && w_win < win))
                    return 0;                    /* a lane met again after another: not in order */
                (*lanes)[n - 1].lo = lo;
                (*lanes)[n - 1].range = hi - lo + 1;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                Lane *grown = PyMem_RawRealloc(*lanes, sizeof(Lane) * cap);
                if (!grown)
                    return -1;
                *lanes = grown;
            }
            n++;
            tid = w.tid;
            win = w_win;
            depth = lo = hi = 0;
        }
        visit++;
        if (e[1] & 1) {
            if (--depth < lo)
                lo = depth;
        } else {
            if (depth > hi)
                hi = depth;
            depth++;
            rows[klass - 1]++;
        }
    }
    if (n > 0) {
        (*lanes)[n - 1].lo = lo;
        (*lanes)[n - 1].range = hi - lo + 1;
    }
    for (Py_ssize_t g = 0; g < n; g++)
        if ((*lanes)[g].range > *max_range)
            *max_range = (*lanes)[g].range;
    *n_lanes = n;
    *n_visit = visit;
    *outside = w.outside;
    n_rows[0] = rows[0];
    n_rows[1] = rows[1];
    return 1;
}

/* Pass 2: pair each lane's events, writing the rows; `paired` counts the pairs of each class. */
static void pair(const Input *in, const Lane *lanes, Rows *rows, int64_t origin, int64_t *last_code, int64_t *last_t,
                 Py_ssize_t *slot_at, int8_t *slot_cls, int64_t *acc, Py_ssize_t *paired)
{
    Py_ssize_t g = -1, win = -1, w_win;
    int64_t tid = 0, depth = 0;
    const int64_t *e;
    int8_t klass;
    Walk w = walk_of(in);
    while (next_event(&w, &e, &w_win, &klass)) {
        const int64_t t = e[0], code = e[1];
        if (g < 0 || w.tid != tid || w_win != win) {
            g++;
            tid = w.tid;
            win = w_win;
            depth = -lanes[g].lo;
            for (int64_t l = 0; l < lanes[g].range; l++)
                last_code[l] = -1;
        }
        if (!(code & 1)) {                       /* begin: open a row at its level */
            const int64_t l = depth++;
            Rows *r = &rows[klass - 1];
            last_code[l] = code;
            last_t[l] = t;
            acc[l] = 0;
            slot_cls[l] = klass;
            slot_at[l] = r->n;
            put_label(&r->label[0], r->n, tid);
            put_label(&r->label[1], r->n, code >> 1);
            put_label(&r->label[2], r->n, code >> 1);
            r->start[r->n] = t - origin;
            r->dur[r->n++] = INT64_MIN;          /* not paired (yet) */
            continue;
        }
        const int64_t l = --depth, j_code = last_code[l], j_t = last_t[l];   /* end: pairs with a begin just before it */
        last_code[l] = code;
        last_t[l] = t;
        if (j_code < 0 || (j_code & 1) || (j_code >> 1) != (code >> 1))
            continue;
        const int k = slot_cls[l] - 1;
        const int64_t dur = t - j_t;
        rows[k].dur[slot_at[l]] = dur;
        rows[k].last[slot_at[l]] = k == 0 ? dur - acc[l] : l;
        paired[k]++;
        if (l > 0 && last_code[l - 1] >= 0 && !(last_code[l - 1] & 1))
            acc[l - 1] += dur;                   /* the open span one level up contains this one */
    }
}

/* Borrow a label table (int8, int16 or int32) of at least `n` entries. */
static int get_labels(PyObject *obj, Py_buffer *view, Py_ssize_t n)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const Py_ssize_t size = view->itemsize;
    if ((size != 1 && size != 2 && size != 4) || view->format == NULL
        || strchr("bhil", view->format[strlen(view->format) - 1]) == NULL || view->len / size < n) {
        PyErr_SetString(PyExc_ValueError, "a label table must be an int8, int16 or int32 array with an entry for "
                                          "every thread (or descriptor)");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* nest_events(chunks, seg_chunk, seg_start, seg_len, seg_tid, code_class, op_labels, span_labels, win_start,
 *             win_stop, origin) -> ((6 op columns), (6 span columns), unmatched, outside), or None when the
 *             lanes are out of order. A class's labels: (by thread index, by descriptor, by descriptor). */
static PyObject *nest_events(PyObject *self, PyObject *args)
{
    PyObject *chunks_obj, *sc_obj, *ss_obj, *sl_obj, *st_obj, *cls_obj, *ws_obj, *we_obj, *label_obj[2][3];
    long long origin;
    if (!PyArg_ParseTuple(args, "O!OOOOO(OOO)(OOO)OOL", &PyList_Type, &chunks_obj, &sc_obj, &ss_obj, &sl_obj,
                          &st_obj, &cls_obj, &label_obj[0][0], &label_obj[0][1], &label_obj[0][2], &label_obj[1][0],
                          &label_obj[1][1], &label_obj[1][2], &ws_obj, &we_obj, &origin))
        return NULL;
    Py_ssize_t n_chunks = PyList_GET_SIZE(chunks_obj);
    Py_buffer sc = {0}, ss = {0}, sl = {0}, st = {0}, cb = {0}, wsb = {0}, web = {0}, lb[2][3] = {{{0}}};
    Py_buffer *chunk_b = PyMem_Calloc(n_chunks ? n_chunks : 1, sizeof(Py_buffer));
    const int64_t **chunk = PyMem_Calloc(n_chunks ? n_chunks : 1, sizeof(int64_t *));
    Py_ssize_t *chunk_n = PyMem_Calloc(n_chunks ? n_chunks : 1, sizeof(Py_ssize_t));
    Lane *lanes = NULL;
    int64_t *last_code = NULL, *last_t = NULL, *acc = NULL;
    Py_ssize_t *slot_at = NULL;
    int8_t *slot_cls = NULL;
    Rows rows[2];
    memset(rows, 0, sizeof rows);
    PyObject *result = NULL;
    Py_ssize_t got_chunks = 0;
    if (!chunk_b || !chunk || !chunk_n) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got_chunks < n_chunks; got_chunks++) {
        if (get_int64_buffer(PyList_GET_ITEM(chunks_obj, got_chunks), &chunk_b[got_chunks], "an events chunk") < 0)
            goto done;
        chunk[got_chunks] = chunk_b[got_chunks].buf;
        chunk_n[got_chunks] = chunk_b[got_chunks].len / 16;
    }
    if (get_int64_buffer(sc_obj, &sc, "seg_chunk") < 0 || get_int64_buffer(ss_obj, &ss, "seg_start") < 0
        || get_int64_buffer(sl_obj, &sl, "seg_len") < 0 || get_int64_buffer(st_obj, &st, "seg_tid") < 0
        || get_int64_buffer(ws_obj, &wsb, "win_start") < 0 || get_int64_buffer(we_obj, &web, "win_stop") < 0
        || PyObject_GetBuffer(cls_obj, &cb, PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    Py_ssize_t n_seg = sc.len / 8;
    if (ss.len / 8 != n_seg || sl.len / 8 != n_seg || st.len / 8 != n_seg || wsb.len != web.len) {
        PyErr_SetString(PyExc_ValueError, "segment columns (and window columns) must have one length");
        goto done;
    }
    const int64_t *seg_chunk = sc.buf, *seg_start = ss.buf, *seg_len = sl.buf, *seg_tid = st.buf;
    int64_t n_threads = 0;
    for (Py_ssize_t k = 0; k < n_seg; k++) {
        if (seg_chunk[k] < 0 || seg_chunk[k] >= n_chunks || seg_start[k] < 0 || seg_len[k] < 0
            || seg_start[k] + seg_len[k] > chunk_n[seg_chunk[k]] || seg_tid[k] < 0 || seg_tid[k] > INT32_MAX) {
            PyErr_SetString(PyExc_IndexError, "a segment lies outside its chunk");
            goto done;
        }
        if (seg_tid[k] >= n_threads)
            n_threads = seg_tid[k] + 1;
    }
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 3; k++)
            if (get_labels(label_obj[c][k], &lb[c][k], k ? (cb.len + 1) / 2 : n_threads) < 0)
                goto done;
    const Input in = {chunk, seg_chunk, seg_start, seg_len, seg_tid, n_seg, cb.buf, cb.len, wsb.buf, web.buf,
                      wsb.len / 8};
    Py_ssize_t n_lanes = 0, n_rows[2] = {0, 0}, max_range = 1, n_visit = 0, outside = 0, paired[2] = {0, 0};
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = measure(&in, &lanes, &n_lanes, n_rows, &max_range, &n_visit, &outside);
    Py_END_ALLOW_THREADS
    if (ok < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (ok == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    last_code = PyMem_RawMalloc(sizeof(int64_t) * max_range);    /* last event seen at each level: code, time */
    last_t = PyMem_RawMalloc(sizeof(int64_t) * max_range);
    acc = PyMem_RawMalloc(sizeof(int64_t) * max_range);          /* child time inside the open begin per level */
    slot_at = PyMem_RawMalloc(sizeof(Py_ssize_t) * max_range);   /* row of the open begin per level */
    slot_cls = PyMem_RawMalloc(max_range);
    if (!last_code || !last_t || !acc || !slot_at || !slot_cls) {
        PyErr_NoMemory();
        goto done;
    }
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < N_LABELS; k++) {
            rows[c].label[k].table = lb[c][k].buf;
            rows[c].label[k].width = lb[c][k].itemsize;
        }
    if (new_rows(&rows[0], n_rows[0]) < 0 || new_rows(&rows[1], n_rows[1]) < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    pair(&in, lanes, rows, origin, last_code, last_t, slot_at, slot_cls, acc, paired);
    compact(&rows[0], paired[0]);
    compact(&rows[1], paired[1]);
    Py_END_ALLOW_THREADS
    PyObject *ops = rows_tuple(&rows[0]), *spans = ops ? rows_tuple(&rows[1]) : NULL;
    if (ops && spans)
        result = Py_BuildValue("OOnn", ops, spans, n_visit - 2 * (paired[0] + paired[1]), outside);
    Py_XDECREF(ops);
    Py_XDECREF(spans);
done:
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < N_COLUMNS; k++)
            Py_XDECREF(rows[c].col[k]);
    PyMem_RawFree(lanes);
    PyMem_RawFree(last_code);
    PyMem_RawFree(last_t);
    PyMem_RawFree(acc);
    PyMem_RawFree(slot_at);
    PyMem_RawFree(slot_cls);
    for (Py_ssize_t k = 0; k < got_chunks; k++)
        PyBuffer_Release(&chunk_b[k]);
    PyMem_Free(chunk_b);
    PyMem_Free(chunk);
    PyMem_Free(chunk_n);
    PyBuffer_Release(&sc);                  /* a no-op for buffers never taken (obj NULL) */
    PyBuffer_Release(&ss);
    PyBuffer_Release(&sl);
    PyBuffer_Release(&st);
    PyBuffer_Release(&cb);
    PyBuffer_Release(&wsb);
    PyBuffer_Release(&web);
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 3; k++)
            PyBuffer_Release(&lb[c][k]);
    return result;
}

static PyMethodDef methods[] = {
    {"nest_events", nest_events, METH_VARARGS,
     "nest_events(chunks, seg_chunk, seg_start, seg_len, seg_tid, code_class, op_labels, span_labels, win_start, "
     "win_stop, origin) -> (op columns, span columns, unmatched, outside), or None when the lanes are out of order "
     "(see nesting.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nesting", "Span nesting kernel (see nesting.py).", -1, methods};

PyMODINIT_FUNC PyInit__nesting(void) { return PyModule_Create(&module); }
