"""The compiler identity: everything besides the graph that decides what a compile produces.

``version`` = TensorFlow version and git version, graphcache's entry-format version, the key scheme
(``KEY_SCHEME``) and the user's identity salt. A different version means an upgrade (or a deliberate
salt change): its entries are purged once that version has not been opened for ``stale_after`` (see
versioning.py).
``identity`` = version + the backend and its options + the device kind. Identities of one version never
purge each other (a GPU trainer and a CPU server can share a cache dir).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import xxhash

from . import codec

# The version of the key scheme (keys.py, canonical.py). A new scheme gives every graph a new key, so entries under
# the old one could never hit again: being part of the version, they are purged as a stale version.
# 2: nodes named by structure (Merkle ids), not by their names.
KEY_SCHEME = 2

# Environment variables that change what TensorFlow's graph rewriters produce.
_TF_ENV_IN_IDENTITY = ("TF_ENABLE_ONEDNN_OPTS",)


@functools.cache
def _tf_versions() -> tuple[str, str]:
    import tensorflow as tf

    return tf.version.VERSION, tf.version.GIT_VERSION


def compiler_version(salt: str = "") -> dict[str, Any]:
    tf_version, git_version = _tf_versions()
    return {"tensorflow": tf_version, "tf_git": git_version, "format": codec.FORMAT_VERSION, "keys": KEY_SCHEME,
            "salt": salt}


def version_id(version: dict[str, Any]) -> str:
    """A short readable id: ``tf2.21.0-1a2b3c4d`` (the hash covers every field)."""
    digest = xxhash.xxh3_64_hexdigest(json.dumps(version, sort_keys=True).encode())[:8]
    return f"tf{version['tensorflow']}-{digest}"


@functools.cache
def device_kind() -> str:
    """``cpu`` or ``gpu:<name>:cc<major.minor>,...``: where the compiled graph will run."""
    import tensorflow as tf

    gpus = []
    try:
        for gpu in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(gpu)
            cc = details.get("compute_capability")
            cc_text = f"cc{cc[0]}.{cc[1]}" if cc else "cc?"
            gpus.append(f"gpu:{details.get('device_name', 'unknown')}:{cc_text}")
    except Exception:  # no usable GPU runtime: a CPU identity is the truth
        gpus = []
    return ",".join(gpus) if gpus else "cpu"


def identity_id(identity: dict[str, Any]) -> str:
    return xxhash.xxh3_64_hexdigest(json.dumps(identity, sort_keys=True).encode())[:12]


def compiler_identity(salt: str, backend_name: str, backend_options: dict[str, Any]) -> dict[str, Any]:
    version = compiler_version(salt)
    return {
        "version": version_id(version),
        "version_info": version,
        "backend": backend_name,
        "backend_options": backend_options,
        "device": device_kind(),
        "env": {name: os.environ.get(name, "") for name in _TF_ENV_IN_IDENTITY},
    }
