"""The Redis store: entries shared between machines through one Redis server, and the compile leases that
give one compile per fleet (core/flight.py holds the policy; this module only talks to Redis).

Layout (``NS`` is the namespace, ``graphcache`` unless the option ``namespace`` says otherwise)::

    NS:v1:<version>:e:<key>                  the manifest: "<token> <chunks> <size> <mtime>"
    NS:v1:<version>:c:<key>:<token>:<i>      chunk i of the entry file written under <token>
    NS:v1:<version>:g:<group id>             a set: the keys listed in a marker group (as remote.py's markers)
    NS:v1:<version>:l:<key>, ...:h:<key>     the compile lease of <key>, and its hedge (one extra compiler)

``v1`` and ``<version>`` mean what they mean in remote.py: a new TensorFlow writes under a new prefix. The
entry file is byte for byte a local entry (codec.py); nothing read from here is trusted before the entry
service (core/service.py) checked it against the key asked for, as for any remote.

Why chunks and a manifest: a Redis string holds at most 512 MB and one big command stalls the server (it is
single-threaded) for everyone, so an entry goes up in ``CHUNK_BYTES`` pieces. A reader must still see the old
state or the whole new entry, never part of it:

- chunks are written under a fresh random token, each with a TTL (``ORPHAN_TTL``): a writer killed
  mid-transfer leaves nothing that any manifest names, and its chunks expire;
- one Lua script (atomic on the server) checks every chunk is there, makes them permanent and sets the
  manifest last, getting the one it replaced; the replaced token's chunks are then deleted;
- a reader gets the manifest, then its chunks; chunks that vanished under it (an overwrite or a purge between
  the two steps, or an eviction) make it read the manifest once more, then it is a miss. Chunk keys never
  change content, so a reader cannot mix two writes.

Leases are ``SET lease token NX PX ttl``; renewing and releasing compare the token first, in a Lua script, so
only the holder extends or frees its lease and a holder whose lease expired frees nobody else's.

Credentials: a password (or ACL user) comes from the URL or the ``password``/``username`` options (the entry
service fills them from ``GRAPHCACHE_REDIS_PASSWORD``); ``url`` and every message this module raises are
redacted (store/urls.py). Errors: every redis-py error is raised as ``RedisUnavailable``, an OSError, which the
remote tier (core/tier.py) treats as a remote failure (fail open, circuit breaker). redis-py is imported on
first use only (``pip install graphcache[redis]``); a Redis Cluster is not supported (the scripts touch
several keys).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ..entry.keyshape import is_group_id, is_key
from .base import Store
from .remote import RemoteError, RemoteFile
from .urls import HIDDEN, redact

LAYOUT = "v1"
NAMESPACE = "graphcache"
CHUNK_BYTES = 16 * 2**20  # each SET stays short for the server and far below Redis's 512 MB string limit
ORPHAN_TTL_MS = 600_000  # chunks not published within 10 minutes (their writer died) expire
RETRIES = 1  # redis-py retries a dropped connection once (a restarted server), then the call fails
SCAN_BATCH = 500
INSTALL_HINT = "pip install graphcache[redis]"

# KEYS[1]: the manifest; KEYS[2..]: the chunks it names, written with a TTL. ARGV[1]: the manifest's value.
_PUBLISH = """
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then return redis.error_reply('a chunk expired before it was published') end
end
for i = 2, #KEYS do redis.call('PERSIST', KEYS[i]) end
return redis.call('SET', KEYS[1], ARGV[1], 'GET')
"""
_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class RedisUnavailable(OSError):  # noqa: N818 - it reads as what happened, like ConnectionRefusedError
    """Redis refused, dropped, timed out or failed a command (OOM, auth, ...): a remote failure."""


class Manifest:
    """What ``NS:v1:<version>:e:<key>`` holds."""

    __slots__ = ("token", "chunks", "size", "mtime")

    def __init__(self, token: str, chunks: int, size: int, mtime: float) -> None:
        self.token, self.chunks, self.size, self.mtime = token, chunks, size, mtime

    def encode(self) -> bytes:
        return f"{self.token} {self.chunks} {self.size} {self.mtime:.3f}".encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Manifest | None:
        """The manifest, or None for a missing (or foreign, unparseable) one."""
        try:
            token, chunks, size, mtime = raw.decode("ascii").split(" ")  # type: ignore[union-attr]
            return cls(token, int(chunks), int(size), float(mtime))
        except (AttributeError, ValueError, UnicodeDecodeError):
            return None


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisStore(Store):
    """Entries and leases under ``NS:v1:<version>:`` of the Redis server ``url`` names. ``version`` binds
    reads, writes and leases to one compiler version; ``scan`` and the management methods see every version.
    ``timeout``: redis-py's connect and socket timeouts (the remote timeout)."""

    keeps_groups = True

    def __init__(self, url: str, *, version: str = "", options: dict[str, Any] | None = None,
                 timeout: float = 5.0, read_only: bool = False) -> None:
        self._url = str(url).strip()
        self.url = redact(self._url)
        self.version = version
        self.timeout = timeout
        self.read_only = read_only
        self.options = dict(options or {})
        self.namespace = str(self.options.pop("namespace", NAMESPACE))
        self.chunk_bytes = int(self.options.pop("chunk_bytes", CHUNK_BYTES))
        self._secrets = [s for s in (self.options.get("password"), *self._url_secrets()) if s]
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._errors: tuple[type[BaseException], ...] = ()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, version={self.version!r})"

    def for_version(self, version: str) -> RedisStore:
        """The same server and options, bound to another compiler version."""
        return RedisStore(self._url, version=version, timeout=self.timeout, read_only=self.read_only,
                          options={**self.options, "namespace": self.namespace, "chunk_bytes": self.chunk_bytes})

    def _url_secrets(self) -> list[str]:
        try:
            parts = urlsplit(self._url)
        except ValueError:
            return []
        found = [unquote(parts.password)] if parts.password else []
        return found + [value for name, value in parse_qsl(parts.query) if name.lower() == "password"]

    def scrub(self, text: str) -> str:
        """``text`` with this store's secrets hidden (redis-py's messages could echo them)."""
        for secret in self._secrets:
            text = text.replace(secret, HIDDEN)
        return text

    # -- the client ----------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """redis-py's client (the package imported, and the URL parsed, on first use; no connection yet)."""
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    def _connect(self) -> Any:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise RemoteError(f"the remote {self.url} needs the redis package: {INSTALL_HINT}") from None
        kwargs = {"socket_timeout": self.timeout, "socket_connect_timeout": self.timeout,
                  "retry": Retry(NoBackoff(), RETRIES), "client_name": "graphcache", **self.options}
        try:
            client = redis.Redis.from_url(self._url, **kwargs)
        except (ValueError, TypeError) as exc:
            raise RemoteError(f"cannot use the remote {self.url}: {self.scrub(str(exc))}") from None
        self._errors = (redis.exceptions.RedisError,)
        self._scripts = {name: client.register_script(text) for name, text in
                         (("publish", _PUBLISH), ("renew", _RENEW), ("release", _RELEASE))}
        return client

    @contextlib.contextmanager
    def _calls(self, what: str) -> Iterator[Any]:
        """The client, with redis-py's errors raised as RedisUnavailable (an OSError)."""
        client = self.client
        try:
            yield client
        except self._errors as exc:
            raise RedisUnavailable(f"{what}: {type(exc).__name__}: {self.scrub(str(exc))}") from None

    def _writable(self) -> None:
        if self.read_only:
            raise RemoteError(f"the remote {self.url} is read-only here")

    # -- names ---------------------------------------------------------------------------------------------
    def _prefix(self, version: str | None = None) -> str:
        version = self.version if version is None else version
        if not version:
            raise RemoteError("no compiler version given for a remote key")
        return f"{self.namespace}:{LAYOUT}:{version}"

    def _name(self, kind: str, key: str, version: str | None = None) -> str:
        if not is_key(key):
            raise RemoteError(f"{key!r} is not a cache key")
        return f"{self._prefix(version)}:{kind}:{key}"

    def _chunk_names(self, key: str, manifest: Manifest, version: str | None = None) -> list[str]:
        base = self._name("c", key, version)
        return [f"{base}:{manifest.token}:{i}" for i in range(manifest.chunks)]

    def _group_name(self, group: str) -> str:
        if not is_group_id(group):
            raise RemoteError(f"{group!r} is not a marker group id")
        return f"{self._prefix()}:g:{group}"

    # -- Store interface -----------------------------------------------------------------------------------
    def _manifest(self, client: Any, key: str, version: str | None = None) -> Manifest | None:
        return Manifest.decode(client.get(self._name("e", key, version)))

    def read(self, key: str) -> bytes | None:
        with self._calls(f"reading {key}") as client:
            for _attempt in range(2):  # chunks replaced under us: the manifest names the new ones
                manifest = self._manifest(client, key)
                if manifest is None:
                    return None
                pipe = client.pipeline(transaction=False)
                for name in self._chunk_names(key, manifest):
                    pipe.get(name)
                chunks = pipe.execute()
                if all(chunk is not None for chunk in chunks):
                    return b"".join(chunks)
            return None  # its chunks are gone (evicted, purged): a miss

    def write_parts(self, key: str, parts: Iterable[bytes | memoryview]) -> None:
        """Publish the entry whole: chunks under a new token (each with a TTL), then one script that makes them
        permanent and sets the manifest; the chunks of the manifest it replaced are deleted after."""
        self._writable()
        data = memoryview(b"".join(parts))
        count = max(1, -(-len(data) // self.chunk_bytes))
        manifest = Manifest(secrets.token_hex(8), count, len(data), time.time())
        names = self._chunk_names(key, manifest)
        with self._calls(f"writing {key}") as client:
            pipe = client.pipeline(transaction=False)
            for i, name in enumerate(names):
                pipe.set(name, data[i * self.chunk_bytes:(i + 1) * self.chunk_bytes], px=ORPHAN_TTL_MS)
            pipe.execute()
            old = Manifest.decode(self._scripts["publish"](keys=[self._name("e", key), *names],
                                                           args=[manifest.encode()], client=client))
            if old is not None and old.token != manifest.token:
                client.unlink(*self._chunk_names(key, old))

    def stat(self, key: str) -> RemoteFile | None:
        with self._calls(f"looking up {key}") as client:
            manifest = self._manifest(client, key)
        if manifest is None:
            return None
        return RemoteFile(key, self._name("e", key), manifest.size, manifest.mtime, self.version)

    def delete(self, key: str) -> int:
        self._writable()
        return self._delete(key, self.version)

    def _delete(self, key: str, version: str) -> int:
        with self._calls(f"deleting {key}") as client:
            manifest = self._manifest(client, key, version)
            if manifest is None:
                return 0
            client.unlink(self._name("e", key, version), *self._chunk_names(key, manifest, version))
        return manifest.size

    def scan(self) -> Iterator[RemoteFile]:
        """Every entry of every version (chunks, groups and leases are not entries)."""
        base = f"{_glob_escape(self.namespace)}:{LAYOUT}:"
        with self._calls("listing entries") as client:
            names = [name.decode() for name in client.scan_iter(match=f"{base}*:e:*", count=SCAN_BATCH)]
            for start in range(0, len(names), SCAN_BATCH):
                batch = names[start:start + SCAN_BATCH]
                for name, raw in zip(batch, client.mget(batch), strict=True):
                    parts = name[len(base):].split(":")  # <version>:e:<key>
                    manifest = Manifest.decode(raw)
                    if len(parts) == 3 and parts[1] == "e" and is_key(parts[2]) and manifest is not None:
                        yield RemoteFile(parts[2], name, manifest.size, manifest.mtime, parts[0])

    # -- marker groups -------------------------------------------------------------------------------------
    def mark(self, group: str, key: str) -> None:
        """List ``key`` in ``group`` (a set). Call it after the entry was published."""
        self._writable()
        name = self._group_name(group)
        with self._calls(f"marking {key}") as client:
            client.sadd(name, key)

    def marked(self, group: str) -> list[str]:
        name = self._group_name(group)
        with self._calls(f"listing the group {group}") as client:
            return sorted(k for k in (m.decode("ascii", "replace") for m in client.smembers(name)) if is_key(k))

    # -- leases (core/flight.py) -----------------------------------------------------------------------------
    def _lease_name(self, key: str, hedge: bool) -> str:
        return self._name("h" if hedge else "l", key)

    def acquire_lease(self, key: str, token: str, ttl: float, hedge: bool = False) -> bool:
        """Take ``key``'s compile lease (or its hedge) for ``ttl`` seconds unless someone holds it."""
        with self._calls(f"taking the lease on {key}") as client:
            return bool(client.set(self._lease_name(key, hedge), token, nx=True, px=max(1, int(ttl * 1000))))

    def renew_lease(self, key: str, token: str, ttl: float, hedge: bool = False) -> bool:
        """Extend the lease ``token`` holds to ``ttl`` seconds from now; False: it is not held by ``token``."""
        with self._calls(f"renewing the lease on {key}") as client:
            return bool(self._scripts["renew"](keys=[self._lease_name(key, hedge)],
                                               args=[token, max(1, int(ttl * 1000))], client=client))

    def release_lease(self, key: str, token: str, hedge: bool = False) -> bool:
        """Free the lease if ``token`` still holds it (compare-and-delete)."""
        with self._calls(f"releasing the lease on {key}") as client:
            return bool(self._scripts["release"](keys=[self._lease_name(key, hedge)], args=[token], client=client))

    def lease_holder(self, key: str, hedge: bool = False) -> str | None:
        """Who holds the lease (its token: host, pid and a random part), or None."""
        with self._calls(f"reading the lease on {key}") as client:
            raw = client.get(self._lease_name(key, hedge))
        return None if raw is None else raw.decode("utf-8", "replace")

    # -- management (the CLI) ------------------------------------------------------------------------------
    def remove(self, files: Iterable[RemoteFile]) -> tuple[int, int]:
        """Delete these entries and their group listings: (count, bytes)."""
        self._writable()
        count = size = 0
        for f in files:
            freed = self._delete(f.key, f.version)
            count, size = count + (freed > 0), size + freed
            with self._calls("unlisting entries") as client:
                for group in client.scan_iter(match=f"{_glob_escape(self._prefix(f.version))}:g:*", count=SCAN_BATCH):
                    client.srem(group, f.key)
        return count, size

    def remove_versions(self, versions: Iterable[str]) -> tuple[int, int]:
        """Delete everything under these versions' prefixes (entries, chunks, groups, leases): (count, bytes)."""
        self._writable()
        versions = set(versions)
        doomed = [f for f in self.scan() if f.version in versions]
        with self._calls("purging versions") as client:
            for version in versions:
                names = list(client.scan_iter(match=f"{_glob_escape(self._prefix(version))}:*", count=SCAN_BATCH))
                for start in range(0, len(names), SCAN_BATCH):
                    client.unlink(*names[start:start + SCAN_BATCH])
        return len(doomed), sum(f.size for f in doomed)
