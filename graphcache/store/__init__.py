"""Where entry bytes live: a small interface (base.py) and its implementations.

``LocalStore`` (one file per entry in the cache dir), ``RemoteStore`` (shared entries on any fsspec URL:
S3, MinIO, Ceph, a shared path; fsspec and its backend are imported on first use only) and
``TieredStore`` (the local store in front of a remote one: read-through, background write-through).
"""

from .base import Store
from .local import LocalStore
from .remote import RemoteError, RemoteFile, RemoteStore
from .tiered import TieredStore

__all__ = ["LocalStore", "RemoteError", "RemoteFile", "RemoteStore", "Store", "TieredStore"]
