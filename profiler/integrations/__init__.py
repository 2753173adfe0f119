"""Integrations with training frameworks; each module is optional and imports its framework itself.

- `profiler.integrations.transformers.ProfviewCallback`: a Hugging Face `Trainer` callback.
- `profiler.integrations.lightning.ProfviewCallback` / `ProfviewProfiler`: PyTorch Lightning.

Importing `profiler` (or this package) imports neither framework; see docs/integrations.md.
"""
