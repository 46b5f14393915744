"""Logging warnings a trace gives through TensorFlow's, absl's and Keras' loggers: recorded while a miss traces,
stored with its entry, handled again by the same logger on a hit.

warned.py does this for Python ``warnings``. TensorFlow's own messages go through ``logging`` instead:
``tf_logging`` and ``tf.get_logger()`` log to the ``tensorflow`` logger (AutoGraph's "could not transform ... and
will run it as-is", a warning user code gives through ``tf.get_logger().warning``), ``absl.logging`` to ``absl``
(Keras' ``io_utils`` and saving code), and ``keras`` is watched for Keras' own. A hit runs no Python, so without
this those messages would reach the user only in the process that stored the trace. (User code that reaches the
``logging`` module itself is refused by the walk: stateful.py.)

While a miss traces, a handler on those three loggers (records of their children propagate to it) keeps every
record of level WARNING and above that this thread logs: logger name, level, message (formatted), where it was
logged, and the text of an exception or stack it carried. Nothing is suppressed: the trace's own output is
printed as ever. On a hit each is rebuilt as a ``LogRecord`` (``Logger.makeRecord`` with the original file, line
and function) and passed to ``Logger.handle`` of the same logger, if that logger is enabled for its level now: the
process's filters, handlers, formats and propagation apply as they would have to the original.

What the recording can miss, and how the key covers it: a record is only made where its logger is enabled for
its level, and a logger's filters drop records before its handlers see them. So whether each watched logger is
enabled for WARNING is in the key (``settings``: a trace stored while TensorFlow's warnings were silenced is not
served where they are shown), and a trace is refused (``context``) while a watched logger has a filter, or while
AutoGraph echoes its log to stdout (``tf.autograph.set_verbosity(..., alsologtostdout=True)``: a print no entry
can repeat). Left out: a message that depends on the process's history rather than on the trace (TensorFlow's
"N out of the last N calls ... triggered tf.function retracing" is logged by ``Function.__call__`` outside the
hook, after a hit as after a trace, and is not recorded); TensorFlow's deprecation notices ("... is deprecated
and will be removed"), given once per process and function by ``deprecation.py``, which keeps what it gave by
function object: not recorded, so a hit gives none and a later call outside a trace gives it, where plain gave it
inside the trace (a replay would give it twice); other once-per-process messages (``log_first_n``, AutoGraph's "could
not transform", which reads an environment variable and is refused anyway: ``recorded``) are recorded as the
storing process gave them. A message holding an object's address (``<function f at 0x...>``) is replayed with the
storing process's address.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from .walk import Uncacheable

WATCHED = ("tensorflow", "absl", "keras")
LEVEL = logging.WARNING
# TensorFlow's deprecation notices are given once per process and function (deprecation._PRINTED_WARNING, keyed by
# function objects): whether a trace gives one is this process's history, and a replay would give it twice.
ONCE_PER_PROCESS = ("tensorflow/python/util/deprecation.py",)
MAX_RECORDS = 64  # a trace that logs more than this keeps its first ones
MAX_TEXT = 4000


class _Recorder(logging.Handler):
    """Keeps this thread's records (a record reaches it once per watched logger it passes: deduplicated)."""

    def __init__(self) -> None:
        super().__init__(LEVEL)
        self.thread = threading.get_ident()
        self.found: list[list[Any]] = []
        self._seen: set[int] = set()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread or id(record) in self._seen or len(self.found) >= MAX_RECORDS or \
                str(record.pathname).replace("\\", "/").endswith(ONCE_PER_PROCESS):
            return
        self._seen.add(id(record))
        extra = ""
        if record.exc_info:
            extra = logging.Formatter().formatException(record.exc_info)
        elif record.exc_text:
            extra = record.exc_text
        self.found.append([record.name, int(record.levelno), record.getMessage()[:MAX_TEXT], str(record.pathname),
                           int(record.lineno or 0), str(record.funcName or ""), extra[:MAX_TEXT],
                           (record.stack_info or "")[:MAX_TEXT]])


def shown() -> dict[str, bool]:
    """Whether each watched logger makes WARNING records now (the ``settings`` key part); raises Uncacheable where
    a recording could miss what the trace gives (see the module docstring)."""
    from tensorflow.python.autograph.utils import ag_logging

    if ag_logging.echo_log_to_stdout:
        raise Uncacheable("context", "AutoGraph echoes its log to stdout (tf.autograph.set_verbosity(..., "
                                     "alsologtostdout=True)): a print a hit cannot repeat")
    for name in WATCHED:
        if logging.getLogger(name).filters:
            raise Uncacheable("context", f"the {name!r} logger has a filter: a warning the trace logs may be dropped "
                                         "before it is recorded")
    return {name: logging.getLogger(name).isEnabledFor(LEVEL) for name in WATCHED}


@contextlib.contextmanager
def recorded() -> Iterator[list[list[Any]]]:
    """Record the WARNING records this thread logs inside through the watched loggers (see ``give``)."""
    recorder = _Recorder()
    loggers = [logging.getLogger(name) for name in WATCHED]
    for logger in loggers:
        logger.addHandler(recorder)
    try:
        yield recorder.found
    finally:
        for logger in loggers:
            logger.removeHandler(recorder)


def give(stored: list[list[Any]]) -> None:
    """Handle records kept by ``recorded`` (a stored entry's) again, each by its own logger."""
    for name, level, message, pathname, lineno, function, exc_text, stack in stored:
        logger = logging.getLogger(name)
        if not logger.isEnabledFor(level):
            continue
        record = logger.makeRecord(name, level, pathname, lineno, message, None, None, function or None,
                                   sinfo=stack or None)
        record.exc_text = exc_text or None
        logger.handle(record)


__all__ = ["LEVEL", "WATCHED", "give", "recorded", "shown"]
