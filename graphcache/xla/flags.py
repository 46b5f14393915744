"""TF_XLA_FLAGS: read, parsed and rewritten the way TensorFlow reads it.

TensorFlow parses ``TF_XLA_FLAGS`` once per process (xla/parse_flags_from_env.cc); graphcache hands it the
user's flags with the persistent cache's directory replaced by its own (binding.py) and keys the XLA
directory by every other flag (identity.py): a flag that can change what XLA builds gives another
directory. The persistent cache's own flags (where and whether executables are stored) do not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TF_XLA_FLAGS = "TF_XLA_FLAGS"
DIR_FLAG = "tf_xla_persistent_cache_directory"
# The persistent cache's own flags: where and whether executables are stored, not what they are.
OWN_FLAGS = frozenset({DIR_FLAG, "tf_xla_persistent_cache_read_only", "tf_xla_persistent_cache_prefix",
                       "tf_xla_persistent_cache_device_types"})
# Flags graphcache adds unless the user set them. Auto-clustering names clusters with a process-wide
# counter by default, so the same graph compiled after other auto-clustered graphs gets another cluster
# name, another fingerprint and a persistent-cache miss; deterministic names make it hit.
DEFAULT_FLAGS = (("tf_xla_deterministic_cluster_names", "true"),)


@dataclass(frozen=True)
class Flag:
    """One token of TF_XLA_FLAGS: its text as given, its name and value (``None``: a bare ``--name``)."""

    text: str
    name: str
    value: str | None


def parse_flags(text: str) -> list[Flag]:
    """Split a TF_XLA_FLAGS string the way TensorFlow does (xla/parse_flags_from_env.cc).

    Flags start with ``-``; ``--name="value"`` or ``--name='value'`` may hold spaces; parsing stops at
    the first token that is not a flag.
    """
    flags: list[Flag] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n or text[i] != "-":
            return flags
        start = i
        while i < n and (text[i] in "-_" or (text[i].isascii() and text[i].isalnum())):
            i += 1
        name = text[start:i].lstrip("-")
        if i + 1 < n and text[i] == "=" and text[i + 1] in "'\"":
            quote = text[i + 1]
            i += 2
            value = []
            while i < n and text[i] != quote:
                if quote == '"' and text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
            i = min(i + 1, n)
            flags.append(Flag(text[start:i], name, "".join(value)))
        else:
            end = i
            while end < n and text[end] not in " \t\r\n":
                end += 1
            rest = text[i:end]
            flags.append(Flag(text[start:end], name, rest[1:] if rest.startswith("=") else None))
            i = end


def with_defaults(flags: list[Flag]) -> list[Flag]:
    """The flags plus graphcache's DEFAULT_FLAGS the user did not set."""
    names = {flag.name for flag in flags}
    return [*flags, *(Flag(f"--{name}={value}", name, value) for name, value in DEFAULT_FLAGS if name not in names)]


def process_flags() -> list[Flag]:
    """TF_XLA_FLAGS as this process would hand it to TensorFlow (the directory flag aside)."""
    return with_defaults(parse_flags(_current_flags_text()))


def flag_bool(flags: list[Flag], name: str) -> bool:
    """A boolean flag's value as TensorFlow reads it (the last one wins; a bare ``--name`` is true)."""
    value: bool = False
    for flag in flags:
        if flag.name == name:
            value = flag.value is None or flag.value.strip().lower() in ("1", "true", "t", "yes")
    return value


def relevant_flags(flags: list[Flag]) -> dict[str, str]:
    """The flags that can change what XLA builds: every flag but the persistent cache's own (last one wins)."""
    out: dict[str, str] = {}
    for flag in flags:
        if flag.name not in OWN_FLAGS:
            out[flag.name] = "true" if flag.value is None else flag.value
    return dict(sorted(out.items()))


def flags_with_directory(flags: list[Flag], directory: Path) -> str:
    """The user's TF_XLA_FLAGS with the persistent-cache directory flag replaced by ours."""
    kept = [flag.text for flag in flags if flag.name != DIR_FLAG]
    return " ".join([*kept, f"--{DIR_FLAG}={_quote(str(directory))}"])


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _current_flags_text() -> str:
    """TF_XLA_FLAGS as TensorFlow reads it: the flags, or (when it names a file) the file's contents."""
    raw = os.environ.get(TF_XLA_FLAGS, "")
    if not raw.strip() or raw.lstrip(" \t\r\n").startswith("-"):
        return raw
    try:
        return Path(raw).read_text()
    except OSError:
        return raw  # TensorFlow will complain about it itself
