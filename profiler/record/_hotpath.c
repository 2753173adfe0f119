/*
 * profview hot path: record spans, instants and samples into per-thread columnar buffers.
 *
 * Why C: a Python `with` block whose __enter__/__exit__ are Python functions costs ~250 ns on a
 * slow core before it records anything; with C methods a recorded span costs about a third of a
 * pure-Python one. Everything here runs with the GIL held, so buffers need no locks: the
 * recording thread appends, the flusher thread calls drain(), and the GIL orders them.
 *
 * Records (little-endian int64 words):
 *   event  = [t_ns, code]                 spans (begin / end), marks, instants
 *   sample = [t_ns, code, a, b]           step ends, queue probes, counters (b = double bits)
 * t_ns is CLOCK_MONOTONIC, the clock time.perf_counter_ns() reads on Linux.
 *
 * Memory is bounded by a global budget: an event that would exceed it is not stored and is
 * counted in the thread's `dropped` total, which drain() reports (nothing is dropped silently).
 * The same API exists in pure Python in buffers.py; recorder.py picks one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct ThreadBuffer {
    unsigned long ident;          /* threading.get_ident() of the owner */
    int64_t *events;              /* pairs [t, code] */
    Py_ssize_t n_events, cap_events;   /* in words */
    int64_t *samples;             /* quads [t, code, a, b] */
    Py_ssize_t n_samples, cap_samples; /* in words */
    int64_t dropped;              /* records refused by the budget since the last drain */
    struct ThreadBuffer *next;
} ThreadBuffer;

static Py_tss_t tss_key = Py_tss_NEEDS_INIT;
static ThreadBuffer *all_buffers = NULL;      /* every thread that ever recorded */
static int enabled = 0;                        /* recording on / off (schedule, start/stop) */
static int64_t budget_bytes = 64 * 1024 * 1024;
static int64_t held_bytes = 0;                 /* bytes currently held by all buffers */
static PyObject *new_thread_callback = NULL;   /* called once in each new recording thread */

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Slow path: the calling thread records for the first time. */
static ThreadBuffer *register_thread(void)
{
    ThreadBuffer *tb = (ThreadBuffer *)PyMem_RawCalloc(1, sizeof(ThreadBuffer));
    if (tb == NULL)
        return NULL;
    tb->ident = PyThread_get_thread_ident();
    tb->next = all_buffers;
    all_buffers = tb;
    PyThread_tss_set(&tss_key, tb);
    if (new_thread_callback != NULL) {
        PyObject *r = PyObject_CallNoArgs(new_thread_callback);
        if (r == NULL)
            PyErr_WriteUnraisable(new_thread_callback);
        Py_XDECREF(r);
    }
    return tb;
}

static inline ThreadBuffer *current_buffer(void)
{
    ThreadBuffer *tb = (ThreadBuffer *)PyThread_tss_get(&tss_key);
    return tb != NULL ? tb : register_thread();
}

/* Make room for `words` more int64 in (*buf, *n, *cap); 0 when the budget refuses. */
static int reserve(int64_t **buf, Py_ssize_t n, Py_ssize_t *cap, Py_ssize_t words)
{
    if (n + words <= *cap)
        return 1;
    Py_ssize_t new_cap = *cap ? *cap * 2 : 4096;
    while (new_cap < n + words)
        new_cap *= 2;
    int64_t grow = (int64_t)(new_cap - *cap) * 8;
    if (held_bytes + grow > budget_bytes)
        return 0;
    int64_t *p = (int64_t *)PyMem_RawRealloc(*buf, (size_t)new_cap * 8);
    if (p == NULL)
        return 0;
    *buf = p;
    held_bytes += grow;
    *cap = new_cap;
    return 1;
}

static inline void put_event(int64_t code)
{
    int64_t t = now_ns();
    ThreadBuffer *tb = current_buffer();
    if (tb == NULL)
        return;
    if (tb->n_events + 2 > tb->cap_events &&
        !reserve(&tb->events, tb->n_events, &tb->cap_events, 2)) {
        tb->dropped++;
        return;
    }
    tb->events[tb->n_events] = t;
    tb->events[tb->n_events + 1] = code;
    tb->n_events += 2;
}

static void put_sample(int64_t t, int64_t code, int64_t a, int64_t b)
{
    ThreadBuffer *tb = current_buffer();
    if (tb == NULL)
        return;
    if (!reserve(&tb->samples, tb->n_samples, &tb->cap_samples, 4)) {
        tb->dropped++;
        return;
    }
    int64_t *s = tb->samples + tb->n_samples;
    s[0] = t; s[1] = code; s[2] = a; s[3] = b;
    tb->n_samples += 4;
}

/* ---- Span: a reusable context manager holding a begin and an end code ---- */

typedef struct {
    PyObject_HEAD
    int64_t begin_code;
    int64_t end_code;
} SpanObject;

static int Span_init(SpanObject *self, PyObject *args, PyObject *kwds)
{
    long long b, e;
    if (!PyArg_ParseTuple(args, "LL", &b, &e))
        return -1;
    self->begin_code = b;
    self->end_code = e;
    return 0;
}

static PyObject *Span_enter(SpanObject *self, PyObject *Py_UNUSED(ignored))
{
    if (enabled)
        put_event(self->begin_code);
    Py_RETURN_NONE;
}

static PyObject *Span_exit(SpanObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (enabled)
        put_event(self->end_code);
    Py_RETURN_FALSE;
}

/* Decorator support: span(fn) returns fn wrapped in this span (done in Python; see recorder.py). */
static PyMethodDef Span_methods[] = {
    {"__enter__", (PyCFunction)Span_enter, METH_NOARGS, "Record the span's begin."},
    {"__exit__", (PyCFunction)(void (*)(void))Span_exit, METH_FASTCALL, "Record the span's end."},
    {NULL, NULL, 0, NULL},
};

static PyObject *Span_get_begin(SpanObject *self, void *c) { return PyLong_FromLongLong(self->begin_code); }
static PyObject *Span_get_end(SpanObject *self, void *c) { return PyLong_FromLongLong(self->end_code); }

static PyGetSetDef Span_getset[] = {
    {"begin_code", (getter)Span_get_begin, NULL, "code recorded on enter", NULL},
    {"end_code", (getter)Span_get_end, NULL, "code recorded on exit", NULL},
    {NULL},
};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profiler.record._hotpath.Span",
    .tp_basicsize = sizeof(SpanObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Span(begin_code, end_code): a reusable context manager recording begin / end events.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Span_init,
    .tp_methods = Span_methods,
    .tp_getset = Span_getset,
};

/* ---- Emitter: a callable recording one point code, usable directly as a framework hook ---- */

typedef struct {
    PyObject_HEAD
    int64_t code;
    PyObject *then;               /* NULL, or called after the event with the same arguments */
    vectorcallfunc vectorcall;
} EmitterObject;

/* Called as a hook with whatever arguments the framework passes (module, args, ...). Without
 * `then` the arguments are ignored and None is returned; with `then` the call is passed on to it
 * unchanged (a wrapper: records the event, then runs e.g. the module's own forward). Vectorcall:
 * no argument tuple is built, so either form costs about as much as emit() itself. */
static PyObject *Emitter_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    EmitterObject *e = (EmitterObject *)self;
    if (enabled)
        put_event(e->code);
    if (e->then != NULL)
        return PyObject_Vectorcall(e->then, args, nargsf, kwnames);
    Py_RETURN_NONE;
}

static int Emitter_init(EmitterObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"code", "then", NULL};
    long long code;
    PyObject *then = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|O", kwlist, &code, &then))
        return -1;
    if (then != Py_None && !PyCallable_Check(then)) {
        PyErr_SetString(PyExc_TypeError, "Emitter: then must be callable or None");
        return -1;
    }
    self->code = code;
    Py_XSETREF(self->then, then == Py_None ? NULL : Py_NewRef(then));
    self->vectorcall = Emitter_vectorcall;
    return 0;
}

static int Emitter_traverse(EmitterObject *self, visitproc visit, void *arg)
{
    return 0;
}

static int Emitter_clear(EmitterObject *self)
{
    return 0;
}

static void Emitter_dealloc(EmitterObject *self)
{
    PyObject_GC_UnTrack(self);
    Emitter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Emitter_get_code(EmitterObject *self, void *c) { return PyLong_FromLongLong(self->code); }

static PyObject *Emitter_get_then(EmitterObject *self, void *c)
{
    return Py_NewRef(self->then != NULL ? self->then : Py_None);
}

static PyGetSetDef Emitter_getset[] = {
    {"code", (getter)Emitter_get_code, NULL, "code recorded on each call", NULL},
    {"then", (getter)Emitter_get_then, NULL, "the callable each call is passed on to, or None", NULL},
    {NULL},
};

static PyTypeObject EmitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profiler.record._hotpath.Emitter",
    .tp_basicsize = sizeof(EmitterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Emitter(code, then=None): calling it records the point event `code` now, then returns "
              "then(*args, **kwargs) (None without `then`).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Emitter_init,
    .tp_dealloc = (destructor)Emitter_dealloc,
    .tp_traverse = (traverseproc)Emitter_traverse,
    .tp_clear = (inquiry)Emitter_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(EmitterObject, vectorcall),
    .tp_getset = Emitter_getset,
};

/* ---- Stepper: profiler.step()'s fast path ---- */

typedef struct {
    PyObject_HEAD
    int64_t code;                 /* the step sample's code */
    int64_t step;                 /* the step now running */
    int64_t overhead;             /* the last call's own cost, recorded with the next step end */
    unsigned long owner;          /* the stepping thread */
    int64_t fast_until;           /* steps below this are entered on the fast path (Profiler._update_fast_step) */
    PyObject *slow;               /* called with the call's time when it does not */
    vectorcallfunc vectorcall;
} StepperObject;

/* One step end: a sample (t, code, step, overhead of the previous call) when recording, then the
 * counter. The profiler's schedule, sources and checks run in `slow`, except for the steps the
 * Profiler declared quiet (`fast_until`: the schedule's action does not change and no source needs
 * its on_step), which keeps such a step end at about one span's cost. */
static PyObject *Stepper_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    StepperObject *self = (StepperObject *)op;
    int64_t t0 = now_ns();
    if (self->step + 1 < self->fast_until && PyThread_get_thread_ident() == self->owner) {
        if (enabled)
            put_sample(t0, self->code, self->step, self->overhead);
        self->step++;
        self->overhead = now_ns() - t0;
        Py_RETURN_NONE;
    }
    PyObject *t = PyLong_FromLongLong(t0);
    if (t == NULL)
        return NULL;
    PyObject *r = PyObject_CallOneArg(self->slow, t);
    Py_DECREF(t);
    return r;
}

static int Stepper_init(StepperObject *self, PyObject *args, PyObject *kwds)
{
    long long code;
    PyObject *slow;
    if (!PyArg_ParseTuple(args, "LO", &code, &slow))
        return -1;
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "Stepper(code, slow): slow must be callable");
        return -1;
    }
    self->code = code;
    Py_INCREF(slow);
    Py_XSETREF(self->slow, slow);
    self->vectorcall = Stepper_vectorcall;
    return 0;
}

static int Stepper_traverse(StepperObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slow);
    return 0;
}

static int Stepper_clear(StepperObject *self)
{
    Py_CLEAR(self->slow);
    return 0;
}

static void Stepper_dealloc(StepperObject *self)
{
    PyObject_GC_UnTrack(self);
    Stepper_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Stepper_members[] = {
    {"code", T_LONGLONG, offsetof(StepperObject, code), 0, "the step sample's code"},
    {"step", T_LONGLONG, offsetof(StepperObject, step), 0, "the step now running"},
    {"overhead", T_LONGLONG, offsetof(StepperObject, overhead), 0, "ns spent in the last step end"},
    {"owner", T_ULONG, offsetof(StepperObject, owner), 0, "ident of the stepping thread"},
    {"fast_until", T_LONGLONG, offsetof(StepperObject, fast_until), 0,
     "steps below this number are entered on the fast path (0: none)"},
    {NULL},
};

static PyTypeObject StepperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profiler.record._hotpath.Stepper",
    .tp_basicsize = sizeof(StepperObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Stepper(code, slow): calling it ends a step (fast path into steps below fast_until, else slow(t_ns)).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Stepper_init,
    .tp_dealloc = (destructor)Stepper_dealloc,
    .tp_traverse = (traverseproc)Stepper_traverse,
    .tp_clear = (inquiry)Stepper_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(StepperObject, vectorcall),
    .tp_members = Stepper_members,
};

/* ---- module functions ---- */

static PyObject *mod_emit(PyObject *m, PyObject *arg)
{
    long long code = PyLong_AsLongLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    if (enabled)
        put_event(code);
    Py_RETURN_NONE;
}

static PyObject *mod_sample(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    /* sample(t, code, a, b): b is an int, or a float stored as its IEEE-754 bits. */
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "sample(t, code, a, b) takes 4 arguments");
        return NULL;
    }
    if (!enabled)
        Py_RETURN_NONE;
    long long t = PyLong_AsLongLong(args[0]);
    long long code = PyLong_AsLongLong(args[1]);
    long long a = PyLong_AsLongLong(args[2]);
    int64_t b;
    if (PyFloat_Check(args[3])) {
        double d = PyFloat_AS_DOUBLE(args[3]);
        memcpy(&b, &d, 8);
    } else {
        b = PyLong_AsLongLong(args[3]);
    }
    if (PyErr_Occurred())
        return NULL;
    put_sample(t, code, a, b);
    Py_RETURN_NONE;
}

static PyObject *mod_set_enabled(PyObject *m, PyObject *arg)
{
    int v = PyObject_IsTrue(arg);
    if (v < 0)
        return NULL;
    enabled = v;
    Py_RETURN_NONE;
}

static PyObject *mod_is_enabled(PyObject *m, PyObject *Py_UNUSED(x)) { return PyBool_FromLong(enabled); }

/* Set the budget, and give back the capacity of empty buffers so that a new recording starts
 * within its own budget rather than inheriting what an earlier one grew. */
static PyObject *mod_set_budget(PyObject *m, PyObject *arg)
{
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    budget_bytes = v;
    for (ThreadBuffer *tb = all_buffers; tb != NULL; tb = tb->next) {
        if (tb->n_events == 0 && tb->cap_events) {
            held_bytes -= (int64_t)tb->cap_events * 8;
            PyMem_RawFree(tb->events);
            tb->events = NULL;
            tb->cap_events = 0;
        }
        if (tb->n_samples == 0 && tb->cap_samples) {
            held_bytes -= (int64_t)tb->cap_samples * 8;
            PyMem_RawFree(tb->samples);
            tb->samples = NULL;
            tb->cap_samples = 0;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *mod_held_bytes(PyObject *m, PyObject *Py_UNUSED(x)) { return PyLong_FromLongLong(held_bytes); }

static PyObject *mod_set_thread_callback(PyObject *m, PyObject *arg)
{
    Py_XDECREF(new_thread_callback);
    new_thread_callback = (arg == Py_None) ? NULL : arg;
    Py_XINCREF(new_thread_callback);
    Py_RETURN_NONE;
}

/* Take what every thread recorded since the last drain.
 * Returns [(ident, events_bytes, samples_bytes, dropped), ...] for threads with anything new. */
static PyObject *mod_drain(PyObject *m, PyObject *Py_UNUSED(x))
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (ThreadBuffer *tb = all_buffers; tb != NULL; tb = tb->next) {
        if (tb->n_events == 0 && tb->n_samples == 0 && tb->dropped == 0) {
            /* Idle since the last drain (a thread that ended, or stopped recording): give its buffers
             * back, so the budget is what recording threads hold, not what ended threads once needed. */
            if (tb->events != NULL) {
                held_bytes -= (int64_t)tb->cap_events * 8;
                PyMem_RawFree(tb->events);
                tb->events = NULL;
                tb->cap_events = 0;
            }
            if (tb->samples != NULL) {
                held_bytes -= (int64_t)tb->cap_samples * 8;
                PyMem_RawFree(tb->samples);
                tb->samples = NULL;
                tb->cap_samples = 0;
            }
            continue;
        }
        PyObject *ev = PyBytes_FromStringAndSize((const char *)tb->events, tb->n_events * 8);
        PyObject *sm = PyBytes_FromStringAndSize((const char *)tb->samples, tb->n_samples * 8);
        PyObject *item = (ev && sm) ? Py_BuildValue("(kOOL)", tb->ident, ev, sm, (long long)tb->dropped) : NULL;
        Py_XDECREF(ev);
        Py_XDECREF(sm);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
        tb->n_events = 0;
        tb->n_samples = 0;
        tb->dropped = 0;
        /* Give back large buffers so a burst does not pin memory for the rest of the run. */
        if (tb->cap_events > (1 << 20)) {
            held_bytes -= (int64_t)tb->cap_events * 8;
            PyMem_RawFree(tb->events);
            tb->events = NULL;
            tb->cap_events = 0;
        }
        if (tb->cap_samples > (1 << 18)) {
            held_bytes -= (int64_t)tb->cap_samples * 8;
            PyMem_RawFree(tb->samples);
            tb->samples = NULL;
            tb->cap_samples = 0;
        }
    }
    return out;
}

static PyObject *mod_now(PyObject *m, PyObject *Py_UNUSED(x)) { return PyLong_FromLongLong(now_ns()); }

static PyMethodDef module_methods[] = {
    {"emit", mod_emit, METH_O, "emit(code): record a point event now in the calling thread."},
    {"sample", (PyCFunction)(void (*)(void))mod_sample, METH_FASTCALL, "sample(t, code, a, b): record a 4-word sample."},
    {"set_enabled", mod_set_enabled, METH_O, "Turn recording on or off for every thread."},
    {"is_enabled", mod_is_enabled, METH_NOARGS, "Whether recording is on."},
    {"set_budget", mod_set_budget, METH_O, "Set the memory budget in bytes for all buffers together."},
    {"held_bytes", mod_held_bytes, METH_NOARGS, "Bytes currently held by all buffers."},
    {"set_thread_callback", mod_set_thread_callback, METH_O, "Callable run once in each new recording thread."},
    {"drain", mod_drain, METH_NOARGS, "Take every thread's records since the last drain."},
    {"now", mod_now, METH_NOARGS, "The recording clock in ns (CLOCK_MONOTONIC)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hotpath_module = {
    PyModuleDef_HEAD_INIT, "_hotpath", "profview's C recording hot path.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__hotpath(void)
{
    if (PyThread_tss_create(&tss_key) != 0)
        return NULL;
    if (PyType_Ready(&SpanType) < 0 || PyType_Ready(&EmitterType) < 0 || PyType_Ready(&StepperType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&hotpath_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SpanType);
    if (PyModule_AddObject(m, "Span", (PyObject *)&SpanType) < 0) {
        Py_DECREF(&SpanType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EmitterType);
    if (PyModule_AddObject(m, "Emitter", (PyObject *)&EmitterType) < 0) {
        Py_DECREF(&EmitterType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&StepperType);
    if (PyModule_AddObject(m, "Stepper", (PyObject *)&StepperType) < 0) {
        Py_DECREF(&StepperType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
