"""The XLA identity: what decides which executables XLA builds, and so which directory TensorFlow reads.

It is the compiler version (TensorFlow + git version, entry format, identity salt), the device kind (GPU
names and compute capabilities, or ``cpu``: graphcache/compile/identity.py, computed without making TensorFlow
parse its XLA flags), the host's CPU architecture and instruction-set flags (XLA CPU executables are built
for the host's ISA), every ``TF_XLA_FLAGS`` flag except the persistent cache's own (flags.py) and
``XLA_FLAGS``. Its id names the directory (``xla/<version>/<id>/``, files.py) and the remote marker group
of its executables (its group, entry/kinds.py): an upgrade or a flag change never loads a stale executable, it reads
and writes another directory.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import xxhash

from ..entry.keyparts import identity_id
from .flags import Flag, relevant_flags

# CPU flags that decide which instructions an executable may use (compared as a set, hashed).
_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "popcnt", "abm", "lzcnt", "movbe", "adx", "aes",
                 "pclmul", "sha", "vpclmul", "gfni", "vaes", "amx", "xsave", "rdrnd", "rdseed", "cx16",
                 "prfchw", "clflushopt", "clwb", "fp", "asimd", "sve", "neon", "crc32", "atomics", "vsx",
                 "altivec")


def host_isa() -> str:
    """The host's architecture and a hash of its instruction-set flags (executables use the host's ISA)."""
    machine = platform.machine() or "unknown"
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    flags.update(f for f in value.split() if f.startswith(_ISA_PREFIXES))
                    break
    except OSError:
        flags.add(platform.processor() or "")
    return f"{machine}:{xxhash.xxh3_64_hexdigest(' '.join(sorted(flags)).encode())[:12]}"


def xla_identity(version: str, device: str, flags: list[Flag]) -> dict[str, Any]:
    return {
        "version": version,
        "backend": "xla",
        "device": device,
        "host": host_isa(),
        "tf_xla_flags": relevant_flags(flags),
        "xla_flags": os.environ.get("XLA_FLAGS", "").strip(),
    }


def xla_identity_id(xla_ident: dict[str, Any]) -> str:
    """The identity's id (12 hex digits): the directory's name and the remote marker group."""
    return identity_id(xla_ident)
