"""The viewer's own user-facing error: bad input that the CLI reports as one sentence."""
from profiler.errors import ProfviewError


class InputError(ProfviewError):
    """The input (directory, file, option value) cannot be read; the message is one sentence."""
