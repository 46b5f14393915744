"""What kind of remote a URL names, and how a URL is shown.

``redis://`` and ``rediss://`` (TLS) name store/redis.py; anything else is an fsspec URL (store/remote.py:
``s3://``, ``gs://``, ``file://``, a plain path). ``graphcache.store.open_remote`` opens either; neither
module, nor its client package, is imported before a URL asks for it.

A Redis URL may carry a password (``redis://:secret@host/0``, ``redis://user:secret@host/0``, or
``?password=secret``). Every URL graphcache prints (warnings, logs, reprs, ``graphcache stats``) goes through
``redact`` first, so the secret never leaves the process that was given it.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDIS_SCHEMES = frozenset({"redis", "rediss"})
HIDDEN = "***"
_SECRET_PARAMS = frozenset({"password", "pass", "secret", "token"})


def scheme(url: str) -> str:
    """The URL's scheme, lower-case ("" for a plain path)."""
    head, sep, _ = str(url).partition("://")
    return head.lower() if sep else ""


def is_redis(url: str) -> bool:
    return scheme(url) in REDIS_SCHEMES


def redact(url: str) -> str:
    """``url`` with any password (in the user info or the query) replaced by ``***``."""
    url = str(url)
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # not parseable: show its scheme only rather than risk a secret
        return f"{scheme(url)}://{HIDDEN}"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{HIDDEN}@{hostport}" if colon else f"{userinfo}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(name.lower() in _SECRET_PARAMS for name, _ in pairs):
            query = urlencode([(name, HIDDEN if name.lower() in _SECRET_PARAMS else value) for name, value in pairs],
                              safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
