"""The remote store: entries shared between machines on any fsspec URL (S3, MinIO, Ceph, GCS, a shared path).

Layout (``PREFIX`` is the URL given, e.g. ``s3://bucket/team/graphcache`` or ``file:///mnt/shared/gc``)::

    PREFIX/v1/<version>/<key>.gce
    PREFIX/v1/<version>/xla/<group id>/<key>

- ``v1``: the version of this layout.
- ``<version>``: the compiler version id (``tf2.21.0-1a2b3c4d``, see identity.py: TensorFlow, its git
  version, the entry format and the identity salt). Every entry of an old TensorFlow lives under one
  prefix, dropped in one go by ``graphcache purge --remote --stale``.
- ``<key>.gce``: the entry, byte for byte the same self-describing file as a local entry (codec.py).
- ``xla/<group id>/<key>``: a zero-byte marker listing the entry ``<key>.gce`` in a marker group, for
  readers that must fetch a whole group before they know its keys. The only group so far is an XLA
  identity (entry/kinds.py says which entries get one): TensorFlow asks for executables by file name at
  compile time, so a machine lists its identity's markers at enable (one listing, no entry downloaded) and
  fetches the entries it lacks. The store knows groups, not what they mean; the folder keeps the name
  ``xla`` because that is the layout (``MARKERS_DIR``). A marker is published only after its entry's
  upload succeeded (core/tier.py), so it never names an entry that was not published yet; it says
  nothing about the entry's content (the entry is fetched and verified like any other), and a marker whose
  entry is gone (purged by key) costs one remote miss. ``scan`` never yields markers; purges remove the
  markers of the entries they remove, and ``--stale`` every marker of the versions it drops.

Safe for many writers and readers without any coordination:

- An entry is written whole in one request: one S3 PUT (a multipart upload for entries over 100 MB,
  which S3 also publishes atomically when it completes); on file systems (``file://``, NFS, SMB, SFTP) a
  temp file in the target folder is renamed onto the final name. A reader never sees a partial object.
- Entries are immutable and content-addressed: two machines racing to upload one key upload the same
  entry, so whichever PUT lands last changes nothing. There is no manifest or index to keep consistent.
- Nothing read from here is trusted before it passed entry/checked.py's checks against the key asked for
  (the entry service, core/service.py, does that before an entry reaches the local cache).

Endpoints and credentials come from the backend's standard places, so one URL scheme talks to AWS S3,
MinIO or Ceph: for ``s3://``, botocore's environment and config files (``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, instance roles,
...), fsspec's configuration (``FSSPEC_S3_ENDPOINT_URL``, ``FSSPEC_S3_KEY``, ..., or an fsspec config
file), and the ``options`` passed here (fsspec storage options, e.g. ``{"endpoint_url": ..., "key": ...}``),
which win. The backend package (``s3fs``, ``gcsfs``, ``adlfs``) is imported on first use only.

This module does plain I/O and raises; the policies (time limits, circuit breaker, background uploads,
fail-open) live in core/tier.py and core/service.py. It never imports TensorFlow: the CLI uses it too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from ..entry.keyshape import ENTRY_SUFFIX, is_group_id, is_key
from ..errors import GraphCacheError
from .base import Store
from .local import TMP_SUFFIX
from .urls import scheme

LAYOUT = "v1"
# The folder of a version that holds the marker groups. Part of layout v1: named after the first (and so
# far only) kind of group, XLA identities; changing it orphans every published marker.
MARKERS_DIR = "xla"
# Object stores publish an object atomically when its (single or multipart) upload completes: no temp name.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "oss", "memory"})
_S3 = frozenset({"s3", "s3a"})
# URL scheme -> the extra that installs its fsspec backend (pyproject.toml); s3 and s3a: the s3 extra.
EXTRAS = {"gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure", "adl": "azure"}
S3_RETRIES = 2  # attempts s3fs makes at a request that timed out or dropped (its default, 5, outlasts any timeout)

T = TypeVar("T")


class RemoteError(GraphCacheError):
    """The remote store is misconfigured or failed (the CLI reports it; GraphCache fails open)."""


class RemoteTimeout(TimeoutError):
    """A remote call did not finish within its time limit."""


class RemoteFile(NamedTuple):
    """One remote entry: its key, full path, size, last-modified time (StoredFile's fields) and compiler version."""

    key: str
    path: str
    size: int
    mtime: float
    version: str = ""


def call_with_deadline(func: Callable[[], T], timeout: float | None, what: str = "remote call") -> T:
    """``func()``, or RemoteTimeout after ``timeout`` seconds.

    The call runs in a daemon thread, so nothing it does (credential lookups, DNS, connect, retries, a
    server that accepts but never answers, a hung network mount) can hold the caller past the deadline or
    keep the process from exiting; a call that overruns finishes or fails in the background, unobserved.
    """
    if timeout is None:
        return func()
    outcome: list[Any] = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append((True, func()))
        except BaseException as exc:  # handed to the caller
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=target, name="graphcache-remote", daemon=True).start()
    if not done.wait(timeout):
        raise RemoteTimeout(f"{what} got no answer within {timeout:g}s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _mtime(info: dict[str, Any]) -> float:
    """A listing entry's modification time as Unix time, whatever the backend calls it (0 if unknown)."""
    for name in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


class RemoteStore(Store):
    """Entries under ``PREFIX/v1/<version>/``. ``version`` binds read/write/delete to one compiler version
    (GraphCache's); ``scan`` and the management methods see every version.

    ``timeout`` configures the backend's own connect/read timeouts where it has them (S3); the overall
    bound on a lookup is the caller's (``call_with_deadline``).
    """

    keeps_groups = True

    def __init__(self, url: str, *, version: str = "", options: dict[str, Any] | None = None,
                 timeout: float = 5.0, read_only: bool = False) -> None:
        url = str(url).strip()
        if not url:
            raise RemoteError("the remote URL is empty")
        self.url = url.rstrip("/") or url
        self.version = version
        self.options = dict(options or {})
        self.timeout = timeout
        self.read_only = read_only
        self._fs: Any = None
        self._root = ""
        self._fs_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r}, version={self.version!r})"

    def for_version(self, version: str) -> RemoteStore:
        """The same remote and options, bound to another compiler version."""
        return RemoteStore(self.url, version=version, options=self.options, timeout=self.timeout,
                           read_only=self.read_only)

    # -- the file system -----------------------------------------------------------------------------------
    @property
    def protocol(self) -> str:
        from fsspec.core import split_protocol

        return split_protocol(self.url)[0] or "file"

    def _storage_options(self) -> dict[str, Any]:
        options = dict(self.options)
        if self.protocol in _S3:
            # Bounded botocore timeouts and retries, unless fsspec's config (FSSPEC_S3_CONFIG_KWARGS, a config
            # file) or the caller's options set their own. fsspec merges its config shallowly, so merge here.
            from fsspec.config import conf

            # One attempt per botocore call (its standard-mode retry sleeps up to 2 s first); s3fs retries a
            # timed-out or dropped request once more after 0.1 s (S3_RETRIES).
            config = {"connect_timeout": self.timeout, "read_timeout": self.timeout,
                      "retries": {"max_attempts": 1, "mode": "standard"}}
            for source in (conf.get("s3", {}), options):
                config.update(source.get("config_kwargs") or {})
            options["config_kwargs"] = config
        # Our own instance: the tweaks below must not leak into other fsspec users in this process.
        options.setdefault("skip_instance_cache", True)
        return options

    @property
    def fs(self) -> Any:
        """The fsspec file system (created, and its backend imported, on first use)."""
        with self._fs_lock:
            if self._fs is None:
                try:
                    from fsspec.core import url_to_fs
                except ImportError:
                    raise RemoteError(f"the remote {self.url!r} needs fsspec: {self._install_hint()}") from None
                try:
                    fs, root = url_to_fs(self.url, **self._storage_options())
                except ImportError as exc:
                    raise RemoteError(f"the remote {self.url!r} needs a package that is not installed ({exc}): "
                                      f"{self._install_hint()}") from None
                except ValueError as exc:
                    raise RemoteError(f"cannot use the remote {self.url!r}: {exc}") from exc
                if self.protocol in _S3 and hasattr(fs, "retries"):
                    fs.retries = S3_RETRIES
                self._root = str(root).rstrip("/")
                self._fs = fs
            return self._fs

    def _install_hint(self) -> str:
        """What to install for this URL: its extra (s3, gcs, azure), else fsspec and the URL's backend."""
        found = scheme(self.url)  # not self.protocol: that needs fsspec, which may be what is missing
        extra = "s3" if found in _S3 else EXTRAS.get(found)
        if extra is not None:
            return f"pip install graphcache[{extra}]"
        return "pip install fsspec and the fsspec backend of this URL"

    @property
    def root(self) -> str:
        """The prefix as a path of the file system (``bucket/team/graphcache``)."""
        _ = self.fs
        return self._root

    @property
    def atomic_put(self) -> bool:
        return self.protocol in _OBJECT_STORES

    # -- paths ---------------------------------------------------------------------------------------------
    def version_prefix(self, version: str) -> str:
        return f"{self.root}/{LAYOUT}/{version}"

    def path_for(self, key: str, version: str | None = None) -> str:
        version = self.version if version is None else version
        if not version:
            raise RemoteError("no compiler version given for a remote path")
        if not is_key(key):
            raise RemoteError(f"{key!r} is not a cache key")
        return f"{self.version_prefix(version)}/{key}{ENTRY_SUFFIX}"

    def markers_root(self, version: str) -> str:
        """The folder of a version's marker groups (see the module docstring)."""
        return f"{self.version_prefix(version)}/{MARKERS_DIR}"

    def markers_prefix(self, group: str, version: str | None = None) -> str:
        """The folder of the marker group ``group``."""
        version = self.version if version is None else version
        if not version:
            raise RemoteError("no compiler version given for a remote path")
        if not is_group_id(group):
            raise RemoteError(f"{group!r} is not a marker group id")
        return f"{self.markers_root(version)}/{group}"

    def marker_path(self, group: str, key: str, version: str | None = None) -> str:
        if not is_key(key):
            raise RemoteError(f"{key!r} is not a cache key")
        return f"{self.markers_prefix(group, version)}/{key}"

    # -- Store interface -----------------------------------------------------------------------------------
    def read(self, key: str) -> bytes | None:
        path = self.path_for(key)
        # s3fs: one GET (its default first sends a HEAD, and on a miss lists the "directory" too).
        kwargs = {"max_concurrency": 1} if self.protocol in _S3 else {}
        try:
            return self.fs.cat_file(path, **kwargs)
        except FileNotFoundError:
            return None

    def write_parts(self, key: str, parts: Iterable[bytes | memoryview]) -> None:
        self.write(key, b"".join(parts))

    def stat(self, key: str) -> RemoteFile | None:
        path = self.path_for(key)
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        return RemoteFile(key, path, int(info.get("size") or 0), _mtime(info), self.version)

    def write(self, key: str, data: bytes) -> None:
        """Publish a whole entry atomically: one PUT on object stores, temp file + rename elsewhere."""
        if self.read_only:
            raise RemoteError(f"the remote {self.url} is read-only here")
        path = self.path_for(key)
        fs = self.fs
        if self.atomic_put:
            fs.pipe_file(path, data)
            return
        parent = path.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{key}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        fs.pipe_file(tmp, data)
        try:
            fs.mv(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                fs.rm_file(tmp)
            raise

    # -- marker groups -------------------------------------------------------------------------------------
    def mark(self, group: str, key: str) -> None:
        """List ``key`` in the marker group ``group`` (a zero-byte object). Call it after the entry's upload
        succeeded."""
        if self.read_only:
            raise RemoteError(f"the remote {self.url} is read-only here")
        path = self.marker_path(group, key)
        if not self.atomic_put:  # file systems need the folder; an empty file has no partial state to hide
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, b"")

    def marked(self, group: str) -> list[str]:
        """The keys listed in the marker group ``group`` of the bound version (one listing; no entry is read)."""
        prefix = self.markers_prefix(group)
        return sorted({key for found, key, _ in self._markers(prefix) if found == group})

    def _markers(self, under: str) -> Iterator[tuple[str, str, str]]:
        """(group id, key, path) of every marker below ``under`` (a version's or a group's folder)."""
        fs = self.fs
        fs.invalidate_cache()  # listings are cached by some backends (s3fs): always list afresh
        try:
            found = fs.find(under)
        except FileNotFoundError:
            return
        base = f"{self.root}/{LAYOUT}/"
        for path in sorted(found):
            parts = path[len(base):].split("/") if path.startswith(base) else []
            if len(parts) == 4 and parts[1] == MARKERS_DIR and is_group_id(parts[2]) and is_key(parts[3]):
                yield parts[2], parts[3], path

    def _remove_paths(self, paths: list[str]) -> None:
        """Delete these objects (batched where the backend can); ones already gone are not an error."""
        if not paths:
            return
        try:
            self.fs.rm(paths)
        except FileNotFoundError:  # another process removed some first: delete the rest one by one
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(path)

    def delete(self, key: str) -> int:
        """Remove ``key``'s entry of the bound version; the bytes freed (0 if it was already gone)."""
        path = self.path_for(key)
        try:
            size = int(self.fs.info(path).get("size") or 0)
            self.fs.rm_file(path)
        except FileNotFoundError:
            return 0
        return size

    def scan(self) -> Iterator[RemoteFile]:
        """Every remote entry of every version (temp files, markers and foreign objects are skipped)."""
        fs = self.fs
        base = f"{self.root}/{LAYOUT}"
        fs.invalidate_cache()  # listings are cached by some backends (s3fs): always list afresh
        try:
            found = fs.find(base, detail=True)
        except FileNotFoundError:
            return
        for path, info in sorted(found.items()):
            if info.get("type", "file") != "file" or not path.startswith(base + "/"):
                continue
            parts = path[len(base) + 1:].split("/")
            if len(parts) != 2 or not parts[1].endswith(ENTRY_SUFFIX):
                continue
            version, key = parts[0], parts[1][: -len(ENTRY_SUFFIX)]
            if is_key(key):
                yield RemoteFile(key, path, int(info.get("size") or 0), _mtime(info), version)

    # -- management (the CLI) ------------------------------------------------------------------------------
    def remove(self, files: Iterable[RemoteFile]) -> tuple[int, int]:
        """Delete these entries and their markers (batched where the backend can): (count, bytes)."""
        files = list(files)
        if not files:
            return 0, 0
        doomed = {(f.version, f.key) for f in files}
        markers = [path for version in sorted({f.version for f in files})
                   for _, key, path in self._markers(self.markers_root(version)) if (version, key) in doomed]
        return self._delete(files, markers)

    def remove_versions(self, versions: Iterable[str]) -> tuple[int, int]:
        """Delete every entry and marker under these version prefixes (and the prefixes): (count, bytes)."""
        versions = set(versions)
        doomed = [f for f in self.scan() if f.version in versions]
        markers = [path for version in sorted(versions)
                   for _, _, path in self._markers(self.markers_root(version))]
        count, size = self._delete(doomed, markers)
        for version in versions:  # file systems keep empty folders; object stores have none
            if not self.atomic_put:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm(self.version_prefix(version), recursive=True)
        return count, size

    def _delete(self, files: list[RemoteFile], markers: list[str]) -> tuple[int, int]:
        if not files and not markers:
            return 0, 0
        if self.read_only:
            raise RemoteError(f"the remote {self.url} is read-only here")
        self._remove_paths(markers)  # markers first: none is left naming an entry that is gone
        self._remove_paths([f.path for f in files])
        self.fs.invalidate_cache()
        return len(files), sum(f.size for f in files)
