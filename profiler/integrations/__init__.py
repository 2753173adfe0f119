"""Integrations with training frameworks; each module is optional and imports its framework itself.

- `profiler.integrations.transformers.ProfviewCallback`: a Hugging Face `Trainer` callback.
- `profiler.integrations.lightning.ProfviewCallback` / `ProfviewProfiler`: PyTorch Lightning.
- `profiler.integrations.mindspore.ProfviewCallback`: a MindSpore `Model.train` callback.
- `profiler.integrations.trackers`: the step breakdown into TensorBoard and MLflow (`profview export`,
  the Trainer callbacks' `log_to_trackers`).

Importing `profiler` (or this package) imports neither framework; see docs/integrations.md.
"""
