"""Errors that mean the user asked for something wrong: printed as one message, no traceback."""


class UserError(Exception):
    """A configuration or data problem the user can fix; the message says how."""


class Diverged(Exception):
    """A training or evaluation loss became non-finite; the run stops with ``status: diverged``."""


def refused_before_training(err: BaseException) -> bool:
    """Whether ``err`` stopped a run before its training began (``lra.run.train.train_and_record``), so that the run
    wrote no record: the folder keeps the record it had, if any."""
    return bool(getattr(err, "before_training", False))
