"""Errors that mean the user asked for something wrong: printed as one message, no traceback."""


class UserError(Exception):
    """A configuration or data problem the user can fix; the message says how."""


class Diverged(Exception):
    """A training or evaluation loss became non-finite; the run stops with ``status: diverged``."""
