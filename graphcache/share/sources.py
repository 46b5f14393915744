"""What ``graphcache explain GRAPH`` compares: the graph, signature and name a compile of GRAPH would use.

The same code paths as the compile itself, so the key matches the one a real run computes:

- a SavedModel directory: one signature, loaded and frozen as ``load_saved_model`` and ``warm`` do
  (saved_model.freeze_signature), named ``<dir name>:<signature>`` as their graph entries are;
- a ``.pb``/``.pbtxt`` file: its feeds and fetches as given, else guessed as ``warm`` guesses them
  (warm.guess_signature), named after the file as ``warm`` names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compile import graphs
from . import saved_model, warm

GRAPH_DEF, SAVED_MODEL = "graph_def", "saved_model"


@dataclass
class Source:
    """A graph to explain, with the signature and name its compile would have."""

    path: Path
    kind: str  # graph_def | saved_model
    graph_def: Any
    feeds: list[str]
    fetches: list[str]
    targets: list[str]
    name: str
    signature_key: str | None = None
    guessed: list[str] = field(default_factory=list)  # which of feeds / fetches / targets were guessed


def pick_signature(path: Path, wanted: str | None) -> str:
    """``wanted``, else ``serving_default`` (load_saved_model's default), else the only signature."""
    available = saved_model.signature_keys(path)
    if wanted is not None:
        if wanted not in available:
            raise saved_model.SavedModelError(f"{str(path)!r} has no signature {wanted!r} "
                                              f"(signatures: {', '.join(available) or 'none'})")
        return wanted
    if saved_model.DEFAULT_SIGNATURE in available or not available:
        return saved_model.DEFAULT_SIGNATURE
    if len(available) == 1:
        return available[0]
    raise saved_model.SavedModelError(f"{str(path)!r} has no {saved_model.DEFAULT_SIGNATURE!r} signature: "
                                      f"choose one with --signature ({', '.join(available)})")


def load(path: str | Path, *, signature: str | None = None, feeds: list[str] | None = None,
         fetches: list[str] | None = None, targets: list[str] | None = None) -> Source:
    """The graph at ``path`` as its compile would see it. ``feeds``/``fetches``/``targets`` apply to GraphDef
    files (None: guessed); ``signature`` to SavedModels. Raises SavedModelError or InvalidGraphError."""
    path = Path(path).expanduser()
    if saved_model.is_saved_model_dir(path):
        key = pick_signature(path, signature)
        graph_def, alias = saved_model.freeze_signature(saved_model.load_model(path), key)
        sig = alias.signature
        return Source(path, SAVED_MODEL, graph_def, list(sig.feeds), list(sig.fetches), list(sig.targets),
                      f"{path.name}:{key}", key)
    if path.is_dir():
        raise saved_model.SavedModelError(f"{str(path)!r} is a directory without saved_model.pb: not a SavedModel")
    graph_def = graphs.read_graph_file(path)
    guessed: list[str] = []
    if feeds is None or (fetches is None and targets is None):
        guessed_feeds, guessed_fetches, guessed_targets = warm.guess_signature(graph_def)
        if feeds is None:
            feeds = guessed_feeds
            guessed.append("feeds")
        if fetches is None and targets is None:
            fetches, targets = guessed_fetches, guessed_targets
            guessed.append("fetches")
            if targets:
                guessed.append("targets")
    return Source(path, GRAPH_DEF, graph_def, list(feeds), list(fetches or []), list(targets or []), path.name,
                  guessed=guessed)


__all__ = ["GRAPH_DEF", "SAVED_MODEL", "Source", "load", "pick_signature"]
