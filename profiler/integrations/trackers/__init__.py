"""The step breakdown in experiment trackers: TensorBoard event files and MLflow runs.

- `record.py`: what a tracker receives from a profiled run (`TrackerRecord`: per-step phases, the
  verdict, the top findings), read from a profview output directory or from a live window.
- `tensorboard.py`, `mlflow.py`: the sinks that write a record through each library's own writer
  (each imports its library when a sink is created: `pip install 'profview[tensorboard]'` /
  `'profview[mlflow]'`).
- `export.py`: `profview export DIR --to tensorboard|mlflow` (every rank of a directory).
- `live.py`: the option of the Hugging Face / Lightning callbacks that logs the same into the
  tracker the trainer already reports to, while it trains.

Names of what is logged (`profview/<step_trace column>`, `profview/verdict`, ...): docs/integrations.md.
"""
