"""The Redis store: entries shared between machines through one Redis server, and the compile leases that
give one compile per fleet (core/flight.py holds the policy; this module only talks to Redis).

Layout (``NS`` is the namespace, ``graphcache`` unless the option ``namespace`` says otherwise)::

    NS:v1:<version>:e:<key>                  the manifest: "<token> <chunks> <size> <mtime>"
    NS:v1:<version>:c:<key>:<token>:<i>      chunk i of the entry file written under <token>
    NS:v1:<version>:g:<group id>             a set: the keys listed in a marker group (as remote.py's markers)
    NS:v1:<version>:groups                   a set: the version's group ids (removing an entry needs no SCAN)
    NS:v1:<version>:l:<key>, ...:h:<key>     the compile lease of <key>, and its hedge (one extra compiler)
    NS:v1:fleet:size, NS:v1:fleet:bytes     a hash "<version>/<key>" -> size, and their total (the budget's)
    NS:v1:fleet:used                         a sorted set: "<version>/<key>" scored by its last use (LRU)
    NS:v1:fleet:parts                        a hash "<version>/<key>" -> the key parts of a graph entry (JSON)
    NS:v1:fleet:hosts, ...:fleet:stats:<host>  the hosts that pushed counters, and each one's (HINCRBYFLOAT)
    NS:v1:fleet:misses                       a list, newest first, of the fleet's recent misses (JSON, capped)

The ``fleet:`` keys are bookkeeping, not entries: publishing and deleting an entry keep its size and last
use (one script each, atomic with the manifest); reads record a use; the rest is pushed by core/fleetlog.py.

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

MISSES_KEPT = 1000  # the fleet's recent misses kept (as the index keeps a dir's: core/index/misses.py)
# KEYS[1]: the manifest; KEYS[2..4]: sizes, total, last uses; KEYS[5..]: the chunks it names, written with a TTL.
# ARGV: the manifest's value, the member "<version>/<key>", the size, the time.
_PUBLISH = """
for i = 5, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then return redis.error_reply('a chunk expired before it was published') end
end
for i = 5, #KEYS do redis.call('PERSIST', KEYS[i]) end
local old = redis.call('HGET', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('INCRBY', KEYS[3], tonumber(ARGV[3]) - (tonumber(old) or 0))
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
return redis.call('SET', KEYS[1], ARGV[1], 'GET')
"""
# KEYS[1]: the manifest; KEYS[2..5]: sizes, total, last uses, parts. ARGV: the member, the chunks' name prefix.
# The entry (manifest, then chunks) and its bookkeeping go in one step: the bytes freed (0: it was not there).
_DELETE = """
local freed = 0
local raw = redis.call('GET', KEYS[1])
if raw then
  local token, chunks, size = string.match(raw, '^(%S+) (%d+) (%d+) ')
  if token then
    redis.call('DEL', KEYS[1])
    for i = 0, tonumber(chunks) - 1 do redis.call('UNLINK', ARGV[2] .. ':' .. token .. ':' .. i) end
    freed = tonumber(size)
  end
end
local known = redis.call('HGET', KEYS[2], ARGV[1])
if known then
  redis.call('HDEL', KEYS[2], ARGV[1])
  if redis.call('DECRBY', KEYS[3], known) <= 0 then redis.call('DEL', KEYS[3]) end
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return freed
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
                         (("publish", _PUBLISH), ("delete", _DELETE), ("renew", _RENEW),
                                                             ("release", _RELEASE))}
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

    def _fleet(self, name: str) -> str:
        return f"{self.namespace}:{LAYOUT}:fleet:{name}"

    def _member(self, key: str, version: str | None = None) -> str:
        return f"{self.version if version is None else version}/{key}"

    def _bookkeeping(self) -> list[str]:
        return [self._fleet("size"), self._fleet("bytes"), self._fleet("used")]

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
                pipe.zadd(self._fleet("used"), {self._member(key): time.time()}, xx=True)  # a use, for the LRU
                chunks = pipe.execute()[:-1]
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
            old = Manifest.decode(self._scripts["publish"](
                keys=[self._name("e", key), *self._bookkeeping(), *names],
                args=[manifest.encode(), self._member(key), manifest.size, manifest.mtime], client=client))
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
            return int(self._scripts["delete"](
                keys=[self._name("e", key, version), *self._bookkeeping(), self._fleet("parts")],
                args=[self._member(key, version), self._name("c", key, version)], client=client) or 0)

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
            client.pipeline(transaction=False).sadd(name, key).sadd(f"{self._prefix()}:groups", group).execute()

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
        by_version: dict[str, list[str]] = {}
        for f in files:
            freed = self._delete(f.key, f.version)
            count, size = count + (freed > 0), size + freed
            by_version.setdefault(f.version, []).append(f.key)
        with self._calls("unlisting entries") as client:  # the groups a version has are listed: no SCAN
            for version, keys in by_version.items():
                prefix = self._prefix(version)
                groups = [g.decode("ascii", "replace") for g in client.smembers(f"{prefix}:groups")]
                pipe = client.pipeline(transaction=False)
                for group in groups:
                    if is_group_id(group):
                        pipe.srem(f"{prefix}:g:{group}", *keys)
                pipe.execute()
        return count, size

    def remove_versions(self, versions: Iterable[str]) -> tuple[int, int]:
        """Delete everything under these versions' prefixes (entries, chunks, groups, leases): (count, bytes)."""
        self._writable()
        versions = set(versions)
        doomed = [f for f in self.scan() if f.version in versions]
        for f in doomed:  # entry by entry first, so the budget's bookkeeping forgets them too
            self._delete(f.key, f.version)
        with self._calls("purging versions") as client:
            for version in versions:
                names = list(client.scan_iter(match=f"{_glob_escape(self._prefix(version))}:*", count=SCAN_BATCH))
                for start in range(0, len(names), SCAN_BATCH):
                    client.unlink(*names[start:start + SCAN_BATCH])
        return len(doomed), sum(f.size for f in doomed)

    # -- the fleet's bookkeeping (core/fleetlog.py, core/budget.py, the CLI) -------------------------------
    def used_bytes(self) -> int:
        """The bytes of every entry published since the bookkeeping existed (the budget's total)."""
        with self._calls("reading the remote's size") as client:
            return max(0, int(client.get(self._fleet("bytes")) or 0))

    def least_recent(self, count: int) -> list[RemoteFile]:
        """The ``count`` entries used longest ago (``mtime``: their last use), oldest first."""
        with self._calls("listing the least recently used entries") as client:
            used = client.zrange(self._fleet("used"), 0, max(0, count - 1), withscores=True)
            sizes = client.hmget(self._fleet("size"), [member for member, _ in used]) if used else []
        found = []
        for (member, score), size in zip(used, sizes, strict=True):
            version, _, key = member.decode("ascii", "replace").rpartition("/")
            if is_key(key) and version:
                found.append(RemoteFile(key, self._name("e", key, version), int(size or 0), float(score), version))
        return found

    def last_uses(self) -> dict[tuple[str, str], float]:
        """(version, key) -> last use, for every entry the bookkeeping knows."""
        with self._calls("reading last uses") as client:
            found = {}
            for member, score in client.zscan_iter(self._fleet("used"), count=SCAN_BATCH):
                version, _, key = member.decode("ascii", "replace").rpartition("/")
                found[(version, key)] = float(score)
            return found

    def touch(self, keys: Iterable[str], when: float | None = None) -> None:
        """Record a use of these entries (of the bound version) that are on the remote (ZADD XX)."""
        members = {self._member(key): time.time() if when is None else when for key in keys if is_key(key)}
        if members:
            with self._calls("recording uses") as client:
                client.zadd(self._fleet("used"), members, xx=True)

    def push_fleet(self, host: str, counters: dict[str, float], misses: Iterable[str] = (),
                   parts: dict[str, str] | None = None) -> None:
        """One round trip: ``counters`` added to ``host``'s (HINCRBYFLOAT), its recent ``misses`` (JSON lines)
        pushed onto the capped list, graph entries' ``parts`` (key -> JSON, of the bound version) set.
        Bookkeeping, not entries: a read-only remote takes them too."""
        misses = list(misses)
        with self._calls("pushing counters") as client:
            pipe = client.pipeline(transaction=False)
            pipe.sadd(self._fleet("hosts"), host)
            pipe.hset(self._fleet("seen"), host, f"{time.time():.3f}")
            for name, value in counters.items():
                if value:
                    pipe.hincrbyfloat(self._fleet(f"stats:{host}"), name, value)
            if misses:
                pipe.lpush(self._fleet("misses"), *misses)
                pipe.ltrim(self._fleet("misses"), 0, MISSES_KEPT - 1)
            if parts:
                pipe.hset(self._fleet("parts"), mapping={self._member(key): value for key, value in parts.items()})
            pipe.execute()

    def fleet_counters(self) -> dict[str, tuple[float, dict[str, float]]]:
        """host -> (its last push, its counters), for every host that pushed."""
        with self._calls("reading the fleet's counters") as client:
            hosts = sorted(h.decode("utf-8", "replace") for h in client.smembers(self._fleet("hosts")))
            pipe = client.pipeline(transaction=False)
            for host in hosts:
                pipe.hgetall(self._fleet(f"stats:{host}"))
            pipe.hgetall(self._fleet("seen"))
            *tables, seen = pipe.execute()
        last = {h.decode("utf-8", "replace"): float(t) for h, t in seen.items()}
        return {host: (last.get(host, 0.0), {k.decode("utf-8", "replace"): float(v) for k, v in table.items()})
                for host, table in zip(hosts, tables, strict=True)}

    def fleet_misses(self, limit: int = MISSES_KEPT) -> list[bytes]:
        """The fleet's recent misses as pushed (JSON), newest first."""
        with self._calls("reading the fleet's misses") as client:
            return list(client.lrange(self._fleet("misses"), 0, max(0, limit - 1)))

    def fleet_parts(self) -> dict[tuple[str, str], bytes]:
        """(version, key) -> the JSON key parts of every graph entry a host published."""
        with self._calls("reading the entries' key parts") as client:
            found = {}
            for member, value in client.hscan_iter(self._fleet("parts"), count=SCAN_BATCH):
                version, _, key = member.decode("ascii", "replace").rpartition("/")
                found[(version, key)] = value
            return found

    def clear_fleet_counters(self) -> int:
        """Forget every host's counters (``zero-stats --remote``); the number of hosts forgotten."""
        with self._calls("resetting the fleet's counters") as client:
            hosts = [h.decode("utf-8", "replace") for h in client.smembers(self._fleet("hosts"))]
            client.unlink(self._fleet("hosts"), self._fleet("seen"), *(self._fleet(f"stats:{h}") for h in hosts))
        return len(hosts)

    def clear_fleet_misses(self) -> None:
        with self._calls("forgetting the fleet's misses") as client:
            client.delete(self._fleet("misses"))
