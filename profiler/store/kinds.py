"""The raw store's vocabulary: the kind of every descriptor (kind, name, extra) an event refers to.

The hot path records `(t, code)` with code = 2 * descriptor id (+1 for a span's end); the kind
says what the event is (docs/architecture.md, "The hot path"): spans (phase, span, op), points
(mark, instant), and samples (counter, step, window start / stop, flush, queue put / get,
collectives).
"""

PHASE, SPAN, OP, MARK, INSTANT, COUNTER, STEP, WINDOW_START, WINDOW_STOP, FLUSH, QUEUE_PUT, QUEUE_GET = (
    "phase",
    "span",
    "op",
    "mark",
    "instant",
    "counter",
    "step",
    "window_start",
    "window_stop",
    "flush",
    "queue_put",
    "queue_get",
)
#: a collective (sample: start, code, duration_ns, bytes); extra is the collective's op type
COMM = "comm"
SPAN_KINDS = (PHASE, SPAN, OP)
