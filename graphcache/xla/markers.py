"""The remote rule of XLA executables: an uploaded entry of kind ``xla`` is listed under its XLA identity.

TensorFlow asks for executables by file name at compile time, too late to look their keys up, so a
machine fetches its identity's executables at enable instead (directory.py: one listing of the remote's
marker group, then verified downloads). The store layer publishes and lists marker groups without knowing
what they mean (store/remote.py, store/tiered.py); this module says which entries get one: GraphCache
hands ``marker_group`` to its TieredStore, and ``graphcache push`` asks it for every entry it uploads.
"""

from __future__ import annotations

from ..entry.codec import peek_header
from ..errors import CorruptEntryError
from ..store.remote import is_group_id
from .files import KIND


def marker_group(data: bytes) -> str | None:
    """The XLA identity id named by an entry's header when it is an XLA executable, else None.

    Only the header is parsed and checked: these are bytes this process just encoded (or verified), and
    their payload may be large.
    """
    try:
        header = peek_header(data)
    except CorruptEntryError:
        return None
    xla_id = header.extra.get("xla_identity")
    return xla_id if header.kind == KIND and isinstance(xla_id, str) and is_group_id(xla_id) else None
