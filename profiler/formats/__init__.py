"""The output contract (docs/formats.md): file names, column lists, step phases, queue names, and
the validated readers. Export writes with these names, the viewer, `compare` and the cluster
analysis read with these readers: one home for every fact of the output directory, one module per job:

- `names`: the file names (SCHEMA_VERSION, RANK_FILES, the cluster files, `rank_file`, `info_files`);
- `columns`: the columns and names of the output contract (step phases, the CSV columns, the Chrome
  trace's limits, the event file's columns and version, the queue names) and the bound on numbers
  (MAX_WHOLE, MAX_MS);
- `text`: text and values as an output file holds them (`valid_text`, `plain_value`, `plain_document`);
- `documents`: the JSON readers (`regular_file`, `read_json`, `read_profiler_info`) and the type of
  every key readers use (DOCUMENT_SCHEMAS, `read_document`);
- `tables`: the CSV reader (`read_csv`) and what it requires of each CSV.

The event file's reader (`read_event_file`) is beside its writer, in profiler/export/event_file.py.

Readers are strict about what consumers rely on (the file parses, the required columns exist,
numbers are numbers) and tolerant of everything else, so a malformed or half-written file gives
one sentence naming it (InputError) instead of a traceback deep inside a consumer.

Importing any of them first sets pandas' string storage (below): every importer of the contract gets it.
"""

import pandas as pd

# pandas >= 3 backs text columns with pyarrow whenever pyarrow is installed, and pyarrow is a
# dependency now (the event file). profview's tables were built and tested with Python-backed
# strings (outputs byte for byte), and pandas fails some merges of empty pyarrow string columns
# (`cannot construct ChunkedArray from empty vector`, in `profview compare`): keep Python storage,
# unless the process chose a storage itself.
if "string_storage" in dir(pd.options.mode) and pd.get_option("mode.string_storage") == "auto":
    pd.set_option("mode.string_storage", "python")
