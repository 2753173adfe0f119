"""Errors that reach the user as one clear sentence (the CLI prints them without a traceback)."""


class ProfviewError(Exception):
    """A user-facing failure: bad input, a foreign directory, a misuse. The message is one sentence."""


class ProfilerUsageWarning(UserWarning):
    """The profiler was used in a way that cannot give correct data; the call was ignored or adjusted."""


class IncompleteInputWarning(UserWarning):
    """An input was read in part (a trace file cut short): what was read is right, the rest is missing."""


class InputError(ProfviewError):
    """An input (an output directory, a file in it, an option value) cannot be read as it should."""
