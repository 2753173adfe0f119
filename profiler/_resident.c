/*
 * profview: spill files' shared mappings, and a native thread that keeps their resident pages under a limit
 * (spill.py's watcher; its Python version is the fallback where this is not built).
 *
 * Why C: the Python watcher needs the GIL to run, and a long numpy or pandas call over a spilled column (a
 * sort, a gather, a factorize of tens of millions of rows) holds it while it touches hundreds of MB of the
 * column's pages: the RSS passed the limit before the watcher could look (a 15 GB trace's import peaked 7-10 %
 * over it). This thread never takes the GIL: it reads the process's RSS every `period_us` and hands the
 * mappings' pages back to the page cache (madvise MADV_DONTNEED: they are a file's shared pages, so their
 * values stay and are read back when touched) whenever it passes the threshold, whatever Python is doing.
 *
 * It also drops them whenever the resident file pages (statm's third field: the mappings', and the libraries'
 * code) grow by more than a budget since the last drop: a drop takes ~10-30 us per MB resident (measured), and
 * a stage reading a spilled column from the page cache touches up to ~15 GB/s, so a drop of 600 MB at the RSS
 * threshold (~50 ms) let the stage touch hundreds of MB more before it ended. Kept to the budget, the
 * mappings' pages take a few ms to drop. What stays resident after a drop (the libraries' code) is the floor
 * the budget counts from, so pages that are not the mappings' never make it drop all the time.
 *
 * The mappings are made here (`Mapping`, a writable buffer numpy arrays view) so that the list is theirs: a
 * mapping leaves the list (under its lock, which a drop holds throughout) before it is unmapped, so the thread
 * never advises an address range the process has reused for its own memory (MADV_DONTNEED on private memory
 * zeroes it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------ the list of mappings */

typedef struct {
    void *addr;
    size_t length;
} Range;

static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;
static Range *ranges = NULL; /* the live mappings, unordered; ranges_lock guards all three */
static size_t n_ranges = 0, cap_ranges = 0;

static int add_range(void *addr, size_t length)
{
    int ok = 1;
    pthread_mutex_lock(&ranges_lock);
    if (n_ranges == cap_ranges) {
        size_t cap = cap_ranges ? 2 * cap_ranges : 64;
        Range *grown = realloc(ranges, cap * sizeof(Range));
        if (grown == NULL)
            ok = 0;
        else
            ranges = grown, cap_ranges = cap;
    }
    if (ok)
        ranges[n_ranges++] = (Range){addr, length};
    pthread_mutex_unlock(&ranges_lock);
    return ok;
}

/* Remove the mapping at `addr` from the list, then unmap it. A drop holds the lock over the whole list, so once
   the range has left the list under the lock no drop is advising it or will: it can be unmapped (and the address
   range reused) after the lock is let go. Not under it: unmapping the last mapping of an unlinked spill file frees
   the file's pages and blocks, which held the thread's drops back for up to 0.6 s on a 16 GB trace. */
static void remove_and_unmap(void *addr, size_t length)
{
    pthread_mutex_lock(&ranges_lock);
    for (size_t i = 0; i < n_ranges; i++)
        if (ranges[i].addr == addr) {
            ranges[i] = ranges[--n_ranges];
            break;
        }
    pthread_mutex_unlock(&ranges_lock);
    munmap(addr, length);
}

/* Hand back every mapping's resident pages. */
static void drop_ranges(void)
{
    pthread_mutex_lock(&ranges_lock);
    for (size_t i = 0; i < n_ranges; i++)
        madvise(ranges[i].addr, ranges[i].length, MADV_DONTNEED);
    pthread_mutex_unlock(&ranges_lock);
}

/* ----------------------------------------------------------------------------------------- the thread */

static atomic_llong threshold_bytes = 0; /* 0: not watching */
static atomic_llong file_budget_bytes = 0; /* 0: no budget on the file pages */
static atomic_int new_floor = 1; /* set by watch(): the file pages' floor is measured again */
static atomic_llong period_us = 2000;
static atomic_llong drops = 0;
static pthread_mutex_t thread_lock = PTHREAD_MUTEX_INITIALIZER;
static int thread_started = 0; /* guarded by thread_lock; reset in a forked child, which has no thread */

/* The process's resident bytes and, of them, its file pages (/proc/self/statm's second and third fields, in
   pages); 0 when they cannot be read. Opened on every read: an fd kept open would go on naming the parent's
   process in a forked child. */
static int resident_bytes(long long *rss, long long *file)
{
    char text[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *at = text;
    strtoll(at, &at, 10); /* the total size */
    const long long page = (long long)sysconf(_SC_PAGESIZE);
    *rss = strtoll(at, &at, 10) * page;
    *file = strtoll(at, NULL, 10) * page;
    return 1;
}

static void *watch_loop(void *unused)
{
    (void)unused;
    long long file_floor = 0; /* the file pages resident after the last drop (or when watching began) */
    for (;;) {
        long long threshold = atomic_load(&threshold_bytes), budget = atomic_load(&file_budget_bytes);
        long long rss, file;
        if (threshold > 0 && resident_bytes(&rss, &file)) {
            if (atomic_exchange(&new_floor, 0))
                file_floor = file;
            if (rss > threshold || (budget > 0 && file > file_floor + budget)) {
                drop_ranges();
                atomic_fetch_add(&drops, 1);
                if (resident_bytes(&rss, &file))
                    file_floor = file;
            }
        }
        long long wait = threshold > 0 ? atomic_load(&period_us) : 20000; /* idle: look for a new limit now and then */
        struct timespec pause = {wait / 1000000, (wait % 1000000) * 1000};
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
            ;
    }
    return NULL;
}

static void forget_thread_in_child(void)
{
    pthread_mutex_init(&thread_lock, NULL);
    pthread_mutex_init(&ranges_lock, NULL); /* the parent's holder (its thread) does not exist here */
    thread_started = 0;
}

/* watch(threshold_bytes, file_budget_bytes, period_us): have the thread drop the pages whenever the RSS passes
   threshold_bytes (0 stops watching) or its file pages grow by file_budget_bytes since the last drop (0:
   never), looking every period_us; starts the thread the first time. */
static PyObject *watch(PyObject *self, PyObject *args)
{
    long long threshold, budget, period;
    if (!PyArg_ParseTuple(args, "LLL", &threshold, &budget, &period))
        return NULL;
    if (threshold < 0 || budget < 0 || period < 100) {
        PyErr_SetString(PyExc_ValueError, "the thresholds must be >= 0 bytes and the period >= 100 us");
        return NULL;
    }
    atomic_store(&period_us, period);
    atomic_store(&file_budget_bytes, budget);
    atomic_store(&new_floor, 1);
    atomic_store(&threshold_bytes, threshold);
    pthread_mutex_lock(&thread_lock);
    int failed = 0;
    if (!thread_started && threshold > 0) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        failed = pthread_create(&thread, &attr, watch_loop, NULL);
        pthread_attr_destroy(&attr);
        thread_started = !failed;
    }
    pthread_mutex_unlock(&thread_lock);
    if (failed) {
        atomic_store(&threshold_bytes, 0);
        errno = failed;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *drop(PyObject *self, PyObject *unused)
{
    Py_BEGIN_ALLOW_THREADS
    drop_ranges();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *drop_count(PyObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(atomic_load(&drops));
}

static PyObject *mapped_bytes(PyObject *self, PyObject *unused)
{
    size_t total = 0;
    pthread_mutex_lock(&ranges_lock);
    for (size_t i = 0; i < n_ranges; i++)
        total += ranges[i].length;
    pthread_mutex_unlock(&ranges_lock);
    return PyLong_FromSize_t(total);
}

/* ----------------------------------------------------------------------------------------- Mapping */

typedef struct {
    PyObject_HEAD
    void *addr;
    Py_ssize_t length;
    int readonly;
} Mapping;

/* Mapping(fd, length, writable=True): a shared mapping of the file's first `length` bytes (length > 0),
   listed for the thread until it is freed. */
static PyObject *Mapping_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    int fd, writable = 1;
    Py_ssize_t length;
    static char *names[] = {"fd", "length", "writable", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "in|p", names, &fd, &length, &writable))
        return NULL;
    if (length <= 0) {
        PyErr_SetString(PyExc_ValueError, "a mapping needs a length > 0");
        return NULL;
    }
    void *addr;
    Py_BEGIN_ALLOW_THREADS
    addr = mmap(NULL, (size_t)length, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    Py_END_ALLOW_THREADS
    if (addr == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (!add_range(addr, (size_t)length)) {
        munmap(addr, (size_t)length);
        return PyErr_NoMemory();
    }
    Mapping *self = (Mapping *)type->tp_alloc(type, 0);
    if (self == NULL) {
        remove_and_unmap(addr, (size_t)length);
        return NULL;
    }
    self->addr = addr;
    self->length = length;
    self->readonly = !writable;
    return (PyObject *)self;
}

static void Mapping_dealloc(Mapping *self)
{
    void *addr = self->addr;
    size_t length = (size_t)self->length;
    Py_BEGIN_ALLOW_THREADS /* the thread may hold the list's lock for a drop */
    remove_and_unmap(addr, length);
    Py_END_ALLOW_THREADS
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Mapping_getbuffer(Mapping *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->addr, self->length, self->readonly, flags);
}

static Py_ssize_t Mapping_length(Mapping *self)
{
    return self->length;
}

static PyBufferProcs Mapping_as_buffer = {(getbufferproc)Mapping_getbuffer, NULL};
static PySequenceMethods Mapping_as_sequence = {.sq_length = (lenfunc)Mapping_length};

static PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "profiler._resident.Mapping",
    .tp_doc = "A shared mapping of a file (a spill file, an event file read back), listed for the resident-page watcher while it lives.",
    .tp_basicsize = sizeof(Mapping),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Mapping_new,
    .tp_dealloc = (destructor)Mapping_dealloc,
    .tp_as_buffer = &Mapping_as_buffer,
    .tp_as_sequence = &Mapping_as_sequence,
};

static PyMethodDef methods[] = {
    {"watch", watch, METH_VARARGS,
     "watch(threshold_bytes, file_budget_bytes, period_us): drop the mappings' pages whenever the RSS passes "
     "threshold_bytes (0: stop) or its file pages grow by file_budget_bytes since the last drop (0: never)"},
    {"drop", drop, METH_NOARGS, "drop(): hand every mapping's resident pages back to the page cache now"},
    {"drop_count", drop_count, METH_NOARGS, "drop_count(): how many times the thread has dropped the pages"},
    {"mapped_bytes", mapped_bytes, METH_NOARGS, "mapped_bytes(): the size of the live mappings"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_resident", NULL, -1, methods};

PyMODINIT_FUNC PyInit__resident(void)
{
    if (PyType_Ready(&MappingType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&MappingType);
    if (PyModule_AddObject(m, "Mapping", (PyObject *)&MappingType) < 0) {
        Py_DECREF(&MappingType);
        Py_DECREF(m);
        return NULL;
    }
    static int at_fork_set = 0;
    if (!at_fork_set)
        at_fork_set = pthread_atfork(NULL, NULL, forget_thread_in_child) == 0;
    return m;
}
