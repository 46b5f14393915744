"""The ``graphcache`` command line: inspect, manage and share a cache dir without importing TensorFlow.

    graphcache [--cache-dir DIR] COMMAND [ARGS]

    dir          print the cache dir's path
    stats        entries, size, hit rate, counters, uncacheable lookups, current version
    zero-stats   reset the counters
    ls           list entries (filter, sort, limit; --json, -q); --remote: the remote cache's entries
    show KEY     one entry's header (a unique key prefix is enough)
    purge        remove entries: --all, --stale, --older-than, --filter, or KEYS; --remote (--all, --stale
                 or KEYS) removes remote entries
    verify       check every entry's format and checksums; --fix removes bad ones
    warm PATH... compile SavedModel dirs and frozen .pb/.pbtxt graphs into the cache (CI warming)
    export FILE  write entries (default: every entry of the current version) to one .tar.zst bundle
    import FILE  verify a bundle completely, then add its entries
    push [KEY...] upload entries the remote cache lacks (default: every entry of the current version)
    explain GRAPH the key a graph would have, whether it is cached, what differs from the nearest entries
    misses       the recent misses, newest first, each with its nearest entry and the parts that differed
    run SCRIPT   run a Python script (or -m MODULE) with every TF1 session compiled through the cache

Data (tables, JSON, keys) goes to stdout, messages, prompts and progress bars to stderr. Handlers raise;
the one runner, :func:`graphcache.cli.app.run`, maps exceptions to exit codes: 0 success (an empty or
missing cache included), 1 runtime failure, 2 usage error, 130 interrupted. ``GRAPHCACHE_DEBUG=1`` adds
tracebacks.

Only TensorFlow-free modules are imported here (``import tensorflow`` alone takes seconds); ``warm``,
``explain`` and ``run`` import it inside the command. The modules, which import one way only (app ->
commands -> helpers):

    app        the group, main (the console script) and the runner
    info       dir, stats, zero-stats
    manage     ls, show, purge, verify
    share      warm, export, import, push
    explain    explain, misses (why did it miss?)
    run        run (zero-code adoption: graphcache/session/adoption.py)
    remote     ls --remote, purge --remote, and the remote calls push makes
    selection  key prefixes, filters and purge plans: which entries a command means
    options    option declarations and parsers, environment settings, the cache dir (State, open_cache)
    output     the one output sink: consoles, modes (table/JSON/quiet), tables, progress, formatting
    errors     CliError and the exit codes
"""

from __future__ import annotations

from .app import cli, main

__all__ = ["cli", "main"]
