"""What opening a cache dir checks before (and without) its index: writable, safe to share, tagged.

These run in every ``GraphCache(dir)``, so they stay cheap (a stat or two) and load nothing of the index:
sqlite3 and the index modules are loaded when the index is first needed (core/service.py), not here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .failures import warn_once

CACHEDIR_TAG = "CACHEDIR.TAG"
_CACHEDIR_TAG_TEXT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by graphcache.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


def warn_if_shared_writable(path: Path) -> None:
    """Anyone who can write the cache dir can plant entries other users will run: say so."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & 0o022:
        who = "other users" if mode & 0o002 else "its group"
        warn_once("shared_writable", f"graphcache: cache dir {path} is writable by {who} (mode "
                                     f"{stat.S_IMODE(mode):o}): anyone who can write it can plant entries this "
                                     "process will run; use chmod 700, or set GRAPHCACHE_SIGNING_KEY")


def is_read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def tag_cache_dir(path: Path) -> None:
    """Write CACHEDIR.TAG once, so backup tools skip the folder."""
    tag = path / CACHEDIR_TAG
    if not tag.exists():
        tag.write_text(_CACHEDIR_TAG_TEXT)
