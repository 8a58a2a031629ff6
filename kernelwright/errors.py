"""Errors a user can cause, kept apart from bugs so the CLI can print them without a traceback."""


class UsageError(ValueError):
    """Bad input from a user: names the argument and what was expected."""


class Unavailable(RuntimeError):
    """A rung that cannot run here (needs a CUDA GPU, Hopper, ...); the message says why."""
