"""Any op / span / counter name and any counter value survives a real recording, `analyse()`, every
output file and the viewer (docs/formats.md, "Text and names"): a derandomised hypothesis search over
names of any code points (surrogates and control characters included) and any floats (NaN, inf), each
example recorded by a real Profiler and read back from op_detail_{rank}.csv, device_counters_{rank}.csv,
the JSON outputs, `profview DIR -o r.html` and `profview DIR --summary`. Lone surrogates come back escaped
as docs/formats.md says (`profiler.formats.valid_text`). Deterministic, but long (~15 s); the fixed
list of odd names is tests/integration/test_names_roundtrip.py.
"""

from __future__ import annotations

import pytest

from profiler.formats.text import valid_text

from support.names_roundtrip import check_round_trip, record

pytestmark = pytest.mark.slow

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: Any code point, surrogates and control characters included (hypothesis leaves Cs out by default).
_ANY_CHAR = st.characters(codec=None, categories=None)


@settings(max_examples=6, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    names=st.lists(st.text(_ANY_CHAR, max_size=12), min_size=1, max_size=6, unique_by=valid_text),
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=3),
)
def test_any_names_round_trip(tmp_path_factory, names, values):
    tmp = tmp_path_factory.mktemp("names")
    record(tmp / "run", names, values)
    check_round_trip(tmp / "run", names, values, tmp)
