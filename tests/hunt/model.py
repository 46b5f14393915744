"""What a scenario is: a program, two variants of its Python-level state, and the files it needs.

Why data rather than test functions: the same scenario is run by pytest, by ``python -m tests.hunt`` and by
whoever rebuilds the key, and its verdict must come from running it, never from the scenario itself.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

# The classes of state the hunt covers (the brief's list; the report groups by them).
USER_AS_LIBRARY = "user-as-library"
LIBRARY_STATE = "library-state"
LIBRARY_FILES = "library-files"
LIBRARY_CONFIG = "library-config"
UNWALKED = "unwalked-path"
PROCESS = "process-state"
STRUCTURE = "structured-input"
KERAS_MODEL = "keras-model"
SAVED_MODEL = "saved-model"  # traces tf.saved_model.save makes (graphcache/traces/savecontext.py)
MUST_HIT = "must-hit"
CLASSES = (USER_AS_LIBRARY, LIBRARY_STATE, LIBRARY_FILES, LIBRARY_CONFIG, UNWALKED, PROCESS, STRUCTURE)

PLACEHOLDER = "@V@"  # replaced by the variant's value in the program and in every file's text


@dataclass(frozen=True)
class Variant:
    """One side of a scenario: the text put in for ``@V@`` (and other tokens), environment, argv."""

    value: str = ""
    env: dict[str, str] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    tokens: dict[str, str] = field(default_factory=dict)  # more placeholders, e.g. {"@VER@": "1.1"}

    def render(self, text: str) -> str:
        text = text.replace(PLACEHOLDER, self.value)
        for token, replacement in self.tokens.items():
            text = text.replace(token, replacement)
        return text


@dataclass(frozen=True)
class Installed:
    """A package "installed" non-editable: ``site-packages/<name>/...`` and a hand-written
    ``<name>-<version>.dist-info`` (METADATA, RECORD with each file's hash), as pip would leave it. The
    version and the modules' text are rendered per variant."""

    name: str
    version: str
    modules: dict[str, str]  # path inside the package ("__init__.py", "ops.py") -> text

    def files(self, variant: Variant, root: str = "site-packages") -> dict[str, str]:
        version = variant.render(self.version)
        out = {f"{root}/{self.name}/{path}": variant.render(text) for path, text in self.modules.items()}
        info = f"{root}/{self.name}-{version}.dist-info"
        out[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {self.name}\nVersion: {version}\n"
        out[f"{info}/INSTALLER"] = "pip\n"
        out[f"{info}/top_level.txt"] = f"{self.name}\n"
        record = [f"{path.removeprefix(root + '/')},{_record_hash(text)},{len(text.encode())}"
                  for path, text in sorted(out.items())]
        out[f"{info}/RECORD"] = "\n".join([*record, f"{info.removeprefix(root + '/')}/RECORD,,"]) + "\n"
        return out


def _record_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class Scenario:
    """A program whose result must follow the variant: ``program`` may hold ``@V@``; it ends by calling
    ``report(value)`` (a number, list, array or tensor), which the runner's prologue defines."""

    name: str
    klass: str
    program: str
    a: Variant
    b: Variant
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text (rendered per variant)
    installed: tuple[Installed, ...] = ()
    why: str = ""  # the value the trace reads, and the path it reads it by

    def files_for(self, variant: Variant) -> dict[str, str]:
        out = {path: variant.render(text) for path, text in self.files.items()}
        for package in self.installed:
            out.update(package.files(variant))
        return out

    @property
    def uses_site_packages(self) -> bool:
        return bool(self.installed)
