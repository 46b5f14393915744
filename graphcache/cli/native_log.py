"""TensorFlow's C++ start-up lines kept off the terminal of the commands that load it (warm, explain).

Importing TensorFlow, and later its Grappler and device libraries, prints absl/oneDNN/CUDA-stub lines
("oneDNN custom operations are on", "Could not find cuda drivers", "This TensorFlow binary is optimized
...") straight to file descriptor 2, between the command's own table rows; ``TF_CPP_MIN_LOG_LEVEL`` does
not reach the ones written before absl is initialized. While such a command runs, descriptor 2 goes to a
temporary file and Python's ``sys.stderr`` to a copy of the real one, so graphcache's own messages,
warnings and progress still show; the native lines are dropped once the command succeeds and printed
after it when it fails, so nothing that explains a failure is lost.

Left alone when the user asked for TensorFlow's logging (``TF_CPP_MIN_LOG_LEVEL`` set, whatever its value)
or for debugging (``GRAPHCACHE_DEBUG=1``), and where descriptor 2 cannot be duplicated.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

from .options import debug_enabled


def wanted() -> bool:
    """Whether the user wants TensorFlow's native log lines on the terminal."""
    return "TF_CPP_MIN_LOG_LEVEL" in os.environ or debug_enabled()


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Run the block with native writes to stderr captured (see the module docstring)."""
    if wanted():
        yield
        return
    try:
        sys.stderr.flush()
        real = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable descriptor 2: nothing to protect
        yield
        return
    python_stderr = sys.stderr
    try:
        swap = python_stderr.fileno() == 2  # else Python's stderr goes elsewhere already (a test's capture)
    except (AttributeError, OSError, ValueError):
        swap = False
    with tempfile.TemporaryFile() as capture:
        if swap:
            encoding = getattr(python_stderr, "encoding", None) or "utf-8"
            sys.stderr = os.fdopen(os.dup(real), "w", buffering=1, encoding=encoding, errors="backslashreplace")
        os.dup2(capture.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(real, 2)
            os.close(real)
            if swap:
                sys.stderr.close()
                sys.stderr = python_stderr
            if failed:  # the native lines may say why: show them after all
                capture.seek(0)
                text = capture.read().decode("utf-8", "replace")
                if text:
                    python_stderr.write(text)
                    python_stderr.flush()
