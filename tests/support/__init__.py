"""What the tests share: loops, workers, fixtures and readers (docs/testing.md "Layout").

Test modules import from here (`from support.cli import run_profview`), never from each other; the
worker scripts here (`multirank_worker.py`, `mindspore_worker.py`, `memory_loops.py`,
`dataloader_story.py`, `scenario_bank.py`'s workers) also run as programs of their own.
"""
