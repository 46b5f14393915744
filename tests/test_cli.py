"""The ``graphcache`` command line, driven as a user would, on realistic cache dirs built without TensorFlow."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import xxhash
from click.testing import CliRunner
from rich.console import Console
from rich.progress import Progress

from graphcache import __version__, cli
from graphcache.cli import manage, output
from graphcache.core.cachedir import CacheDir
from graphcache.core.counters import count_lookup
from graphcache.core.filters import (
    Filter,
    FilterError,
    SortOrder,
    apply_filters,
    parse_filter,
    parse_sort,
    sort_rows,
)
from graphcache.core.index.database import IndexRow
from graphcache.core.selection import SelectionError, no_current_version, resolve_prefix
from graphcache.core.units import UnitError, format_size, parse_size
from graphcache.entry import kinds
from graphcache.entry.codec import EntryHeader, encode
from graphcache.store import LocalStore

ROOT = Path(__file__).resolve().parent.parent
DAY = 86400.0
CURRENT = "tf2.16.1-aaaaaaaa"
OLD = "tf2.15.0-bbbbbbbb"


def key_of(i: int) -> str:
    return xxhash.xxh3_128_hexdigest(str(i).encode())


@dataclass(frozen=True)
class Spec:
    name: str
    version: str
    payload: int  # payload bytes (random, stored uncompressed)
    created_days: float  # days ago
    used_days: float  # days ago
    compile_seconds: float = 1.5


SPECS = {
    "small": Spec("small", CURRENT, 1_000, 30, 1 / 24),
    "medium": Spec("medium", CURRENT, 200_000, 20, 10),
    "big": Spec("big", CURRENT, 1_500_000, 10, 2, compile_seconds=95.0),
    "old-model": Spec("old-model", OLD, 5_000, 60, 40),
    "old-big": Spec("old-big", OLD, 300_000, 50, 8),
}


@dataclass
class Cache:
    root: Path
    keys: dict[str, str]  # name -> key
    now: float

    def path(self, name: str) -> Path:
        return LocalStore(self.root).path_for(self.keys[name])

    def size(self, name: str) -> int:
        return self.path(name).stat().st_size

    def names_of(self, keys) -> set[str]:
        by_key = {k: n for n, k in self.keys.items()}
        return {by_key[k] for k in keys}

    def present(self) -> set[str]:
        return {name for name in self.keys if self.path(name).exists()}


def write_entry(root: Path, key: str, spec: Spec, now: float) -> None:
    header = EntryHeader(
        key=key, version=spec.version,
        identity={"version": spec.version, "backend": "grappler", "backend_options": {"level": 2}, "device": "cpu"},
        name=spec.name, created=now - spec.created_days * DAY, compile_seconds=spec.compile_seconds,
        key_parts={"graph": "1f2e3d4c5b6a7988", "signature": "0a0b0c0d0e0f1011"},
        extra={"feeds": ["input:0"], "fetches": ["Identity:0"], "targets": []})
    LocalStore(root).write(key, encode(header, os.urandom(spec.payload), compress=False))


def build_cache(root: Path, specs: dict[str, Spec] = SPECS) -> Cache:
    now = time.time()
    keys = {name: key_of(i) for i, name in enumerate(specs)}
    root.mkdir(parents=True, exist_ok=True)
    for name, spec in specs.items():
        write_entry(root, keys[name], spec, now)
    cache_dir = CacheDir(root)
    index = cache_dir.index
    index.record_version(OLD, {"tensorflow": "2.15.0"}, now - 30 * DAY)
    index.record_version(CURRENT, {"tensorflow": "2.16.1"}, now - 3600)
    assert cache_dir.reconcile() == (len(specs), 0)
    for name, spec in specs.items():
        index.touch(keys[name], now - spec.used_days * DAY)
    index.add_counters({"hits": 3, "misses": 1, "compiles": 1, "compile_seconds": 12.5, "saved_seconds": 30.0,
                        "uncacheable.resource_ops": 2})
    index.close()
    return Cache(root, keys, now)


@pytest.fixture
def cache(tmp_path) -> Cache:
    return build_cache(tmp_path / "cache")


def invoke(args: list[str], cache: Cache | Path | None = None, **kwargs):
    root = cache.root if isinstance(cache, Cache) else cache
    full = [*args, "--cache-dir", str(root)] if root is not None else args
    return CliRunner().invoke(cli.cli, full, **kwargs)


def invoke_json(args: list[str], cache: Cache | Path, exit_code: int = 0):
    result = invoke([*args, "--json"], cache)
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def run_module(*args: str, stdin=subprocess.DEVNULL, env: dict[str, str] | None = None):
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "graphcache", *args], capture_output=True, text=True,
                          stdin=stdin, env=full_env, timeout=60)


# -- filters.py: pure functions ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("4096", 4096), ("10MB", 10_000_000), ("10mb", 10_000_000), ("1GiB", 2**30), ("1.5 KiB", 1536),
    ("500kB", 500_000), ("2k", 2000), ("3TB", 3 * 10**12), ("7B", 7), ("0.5MiB", 2**19),
])
def test_parse_size_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "10XB", "-5MB", "1e3", "10 M B"])
def test_parse_size_rejects(text):
    with pytest.raises(UnitError, match="not a size"):
        parse_size(text)


def test_format_size():
    assert [format_size(n) for n in (0, 1023, 1024, 1536, 10 * 2**20, 3 * 2**40)] == \
        ["0 B", "1023 B", "1.0 KiB", "1.5 KiB", "10.0 MiB", "3.0 TiB"]


def row(key="k", name="net", kind="graph", size=100, created=0.0, last_used=0.0, version=CURRENT):
    return IndexRow(key, name, kind, size, created, last_used, version, "identity", 1.0)


def test_filter_accessed_is_an_age_older_than():
    now = 1_000_000_000.0
    recent, stale = row("a", last_used=now - 2 * DAY), row("b", last_used=now - 8 * DAY)
    assert apply_filters([recent, stale], [parse_filter("accessed>7d")], now=now) == [stale]
    assert apply_filters([recent, stale], [parse_filter("last_used<=7d")], now=now) == [recent]
    created = row("c", created=datetime.fromisoformat("2024-01-10T00:00:00+00:00").timestamp())
    assert parse_filter("created<2024-02-01").matches(created, now=now)
    assert not parse_filter("created>2024-02-01T00:00:00Z").matches(created, now=now)


def test_filter_sizes_identity_and_globs():
    small, big = row("a", size=999_999), row("b", size=1_000_001, version=OLD, name="resnet50")
    assert apply_filters([small, big], [parse_filter("size>1MB")], now=0) == [big]
    assert apply_filters([small, big], [parse_filter("size >= 1 MiB")], now=0) == []
    assert apply_filters([small, big], [parse_filter("identity!=current")], now=0, current_version=CURRENT) == [big]
    assert apply_filters([small, big], [parse_filter("version=current")], now=0, current_version=CURRENT) == [small]
    assert apply_filters([small, big], [parse_filter(f"identity={OLD}")], now=0) == [big]
    assert apply_filters([small, big], [parse_filter("name=resnet*")], now=0) == [big]
    assert apply_filters([small, big], [parse_filter("kind!=graph")], now=0) == []
    both = [parse_filter("size>1kB"), parse_filter("name!=resnet*")]
    assert apply_filters([small, big], both, now=0) == [small]
    assert parse_filter("identity!=current").uses_current and not parse_filter("name=current").uses_current


@pytest.mark.parametrize(("expr", "problem"), [
    ("size", "expected FIELD OP VALUE"), ("color=red", "unknown field 'color'"), ("size>", "missing value"),
    ("size>>3", "not a size"), ("accessed=7d", "use <, <=, > or >="), ("accessed>soon", "neither an age"),
    ("name>abc", "use = or !="), ("identity<current", "use = or !="),
])
def test_parse_filter_errors_name_the_expression(expr, problem):
    with pytest.raises(FilterError) as info:
        parse_filter(expr)
    assert repr(expr) in str(info.value) and problem in str(info.value)


def test_parse_filter_fields():
    assert parse_filter("size>=10MB") == Filter("size>=10MB", "size", ">=", 10_000_000, "bytes")
    assert parse_filter("accessed>7d") == Filter("accessed>7d", "accessed", ">", 7 * DAY, "age")
    assert parse_filter("name==x").op == "="


def test_sort_orders():
    rows = [row("b", size=2), row("a", size=2), row("c", size=1)]
    assert parse_sort("size:desc") == SortOrder("size", True)
    assert parse_sort("accessed") == SortOrder("last_used", False)
    assert [r.key for r in sort_rows(rows, parse_sort("size"))] == ["c", "a", "b"]
    assert [r.key for r in sort_rows(rows, parse_sort("size:desc"))] == ["a", "b", "c"]
    for bad in ("colour", "size:up"):
        with pytest.raises(FilterError, match=repr(bad)):
            parse_sort(bad)


# -- stats, zero-stats, dir ---------------------------------------------------------------------------------------
def test_stats_json(cache):
    data = invoke_json(["stats"], cache)
    assert data["entries"] == 5
    assert data["bytes"] == sum(cache.size(name) for name in SPECS)
    assert data["max_size"] == 10 * 2**30  # the default cap (GRAPHCACHE_MAX_SIZE unset)
    assert (data["hits"], data["misses"], data["compiles"], data["errors"]) == (3, 1, 1, 0)
    assert (data["compile_seconds"], data["saved_seconds"]) == (12.5, 30.0)
    assert data["hit_rate"] == 0.75
    assert data["uncacheable"]["resource_ops"] == 2 and set(data["uncacheable"]) >= {"io_error", "read_only"}
    assert data["identity"] == CURRENT
    versions = {v["version"]: v for v in data["versions"]}
    assert versions[OLD]["entries"] == 2 and not versions[OLD]["current"] and versions[CURRENT]["current"]
    assert datetime.fromisoformat(versions[CURRENT]["last_open"]).utcoffset().total_seconds() == 0


def test_stats_json_headline_adds_every_kind_and_breaks_them_down(cache):
    data = invoke_json(["stats"], cache)
    assert data["exists"] is True
    # counts recorded before the per-kind counters are read as the graph lookups they were
    assert data["by_kind"]["graph"] == {"entries": 5, "bytes": data["bytes"], "hits": 3, "misses": 1,
                                        "compiles": 1, "compile_seconds": 12.5, "saved_seconds": 30.0}
    index = CacheDir(cache.root).index
    index.add_counters({**count_lookup(kinds.TF_FUNCTION, hits=4, saved_seconds=2.0),
                        **count_lookup(kinds.TF_FUNCTION, misses=2, compiles=2, compile_seconds=3.0),
                        **count_lookup(kinds.SAVED_MODEL, hits=1, saved_seconds=5.0),
                        **count_lookup(kinds.XLA, hits=2)})
    index.close()
    data = invoke_json(["stats"], cache)
    by_kind = data["by_kind"]
    assert set(by_kind) == {"graph", "tf_function", "saved_model", "xla"}
    assert by_kind["graph"]["hits"] == 0 and by_kind["graph"]["entries"] == 5  # now counted per kind
    assert (by_kind["tf_function"]["hits"], by_kind["tf_function"]["misses"]) == (4, 2)
    assert data["totals"] == {"hits": 7, "misses": 2, "compiles": 2, "compile_seconds": 3.0,
                              "saved_seconds": 7.0, "hit_rate": 7 / 9}
    # the older keys keep their meaning: graph (and SavedModel) lookups, TF2 functions' and XLA's own
    assert (data["hits"], data["function_hits"], data["function_compiles"], data["xla_hits"]) == (4, 4, 2, 2)
    table = invoke(["stats"], cache).stdout
    assert "77.8%" in table and "tf_function" in table and "saved_model" in table


def test_stats_json_of_a_missing_dir_says_so(tmp_path):
    data = invoke_json(["stats"], tmp_path / "nowhere")
    assert data["exists"] is False and data["entries"] == 0 and data["by_kind"] == {}
    assert data["totals"]["hit_rate"] is None


def test_stats_human(cache):
    result = invoke(["stats"], cache)
    assert result.exit_code == 0
    for text in ("Hit rate", "75.0%", CURRENT, "resource_ops 2", "Size on disk"):
        assert text in result.stdout
    assert format_size(sum(cache.size(name) for name in SPECS)) in result.stdout


def test_zero_stats_resets_counters_only(cache):
    result = invoke(["zero-stats"], cache)
    assert result.exit_code == 0 and "reset" in result.stderr
    data = invoke_json(["stats"], cache)
    assert (data["hits"], data["misses"], data["uncacheable"]["resource_ops"]) == (0, 0, 0)
    assert data["entries"] == 5


def test_missing_cache_dir_reads_as_empty_and_is_not_created(tmp_path):
    missing = tmp_path / "nowhere"
    assert invoke_json(["stats"], missing)["entries"] == 0
    assert invoke_json(["ls"], missing) == []
    assert invoke(["ls"], missing).exit_code == 0
    assert invoke(["zero-stats"], missing).exit_code == 0
    assert invoke_json(["verify"], missing)["checked"] == 0
    assert invoke_json(["purge", "--all", "--yes"], missing) == {"removed": [], "count": 0, "bytes": 0,
                                                                  "dry_run": False}
    assert not missing.exists()


def test_existing_dir_without_index_stays_without_one_when_empty(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert invoke_json(["stats"], empty)["entries"] == 0
    assert invoke_json(["ls"], empty) == []
    assert not (empty / "index.db").exists()


def test_cache_dir_option_positions_and_environment(cache, monkeypatch, tmp_path):
    runner = CliRunner()
    before = runner.invoke(cli.cli, ["--cache-dir", str(cache.root), "ls", "-q"])
    after = runner.invoke(cli.cli, ["ls", "-q", "--cache-dir", str(cache.root)])
    assert before.exit_code == after.exit_code == 0
    assert before.stdout == after.stdout and len(before.stdout.split()) == 5
    overridden = runner.invoke(cli.cli, ["--cache-dir", str(tmp_path / "other"), "ls", "-q",
                                         "--cache-dir", str(cache.root)])
    assert overridden.stdout == before.stdout
    monkeypatch.setenv("GRAPHCACHE_DIR", str(cache.root))
    assert runner.invoke(cli.cli, ["dir"]).stdout.strip() == str(cache.root)
    assert runner.invoke(cli.cli, ["ls", "-q"]).stdout == before.stdout


# -- ls ---------------------------------------------------------------------------------------------------------
def test_ls_json_shape_and_default_order(cache):
    data = invoke_json(["ls"], cache)
    assert [item["name"] for item in data] == ["small", "big", "old-big", "medium", "old-model"]  # last used first
    big = next(item for item in data if item["name"] == "big")
    assert set(big) >= {"key", "name", "kind", "size", "created", "last_used", "identity", "compile_seconds"}
    assert big["key"] == cache.keys["big"] and big["kind"] == "graph"
    assert big["size"] == cache.size("big") and isinstance(big["size"], int)
    assert big["identity"] == CURRENT and big["compile_seconds"] == 95.0
    for field, days in (("created", 10), ("last_used", 2)):
        when = datetime.fromisoformat(big[field])
        assert when.utcoffset().total_seconds() == 0
        assert abs(when.timestamp() - (cache.now - days * DAY)) < 2


def test_ls_table_and_quiet(cache):
    table = invoke(["ls"], cache)
    assert table.exit_code == 0
    header = table.stdout.splitlines()[0].split()
    assert header == ["KEY", "NAME", "SIZE", "CREATED", "LAST", "USED", "IDENTITY", "COMPILE", "TIME"]
    assert format_size(cache.size("big")) in table.stdout and "1m 35s" in table.stdout and "10d ago" in table.stdout
    quiet = invoke(["ls", "-q"], cache)
    assert quiet.stdout.split() == [cache.keys[n] for n in ("small", "big", "old-big", "medium", "old-model")]
    assert invoke(["ls", "-q", "--json"], cache).exit_code == 2


@pytest.mark.parametrize(("filters", "expected"), [
    (["size>1MB"], {"big"}),
    (["size>1.4MiB"], {"big"}),
    (["size>1.5MiB"], set()),
    (["size<10kB"], {"small", "old-model"}),
    (["size>=250000", "size<1000000"], {"old-big"}),
    (["accessed>7d"], {"medium", "old-model", "old-big"}),
    (["accessed<1d"], {"small"}),
    (["created>45d"], {"old-model", "old-big"}),
    (["identity!=current"], {"old-model", "old-big"}),
    (["identity=current"], {"small", "medium", "big"}),
    (["name=old-*"], {"old-model", "old-big"}),
    (["identity!=current", "accessed>30d"], {"old-model"}),
])
def test_ls_filters(cache, filters, expected):
    args = ["ls"]
    for expr in filters:
        args += ["--filter", expr]
    assert {item["name"] for item in invoke_json(args, cache)} == expected


def test_ls_sort_and_limit(cache):
    data = invoke_json(["ls", "--sort", "size:desc", "--limit", "2"], cache)
    assert [item["name"] for item in data] == ["big", "old-big"]
    data = invoke_json(["ls", "--sort", "created"], cache)
    assert [item["name"] for item in data] == ["old-model", "old-big", "small", "medium", "big"]


@pytest.mark.parametrize(("args", "named"), [
    (["--filter", "size>>3"], "size>>3"), (["--filter", "colour=red"], "colour=red"),
    (["--sort", "weight"], "weight"), (["--limit", "-1"], "-1"),
])
def test_ls_bad_arguments_are_usage_errors(cache, args, named):
    result = invoke(["ls", *args], cache)
    assert result.exit_code == 2
    assert named in result.stderr and "graphcache: error:" in result.stderr
    assert result.stdout == ""


# -- show -------------------------------------------------------------------------------------------------------
def test_show_by_prefix(cache):
    data = invoke_json(["show", cache.keys["big"][:10]], cache)
    assert data["key"] == cache.keys["big"] and data["name"] == "big" and data["kind"] == "graph"
    assert data["size"] == cache.size("big") and data["payload_size"] == 1_500_000
    assert data["version"] == CURRENT and data["current"] is True
    assert data["identity"]["backend_options"] == {"level": 2}
    assert data["key_parts"] == {"graph": "1f2e3d4c5b6a7988", "signature": "0a0b0c0d0e0f1011"}
    assert data["extra"]["feeds"] == ["input:0"] and data["extra"]["fetches"] == ["Identity:0"]
    assert data["compile_seconds"] == 95.0
    assert abs(datetime.fromisoformat(data["created"]).timestamp() - (cache.now - 10 * DAY)) < 2
    human = invoke(["show", cache.keys["old-model"][:8]], cache)
    assert human.exit_code == 0
    for text in ("old-model", OLD, "not current", "Identity:0", "backend: grappler", "graph: 1f2e3d4c5b6a7988"):
        assert text in human.stdout


def test_show_unknown_and_ambiguous_keys(tmp_path):
    first = key_of(0)
    twin = next(i for i in range(1, 1000) if key_of(i)[0] == first[0])
    specs = {"a": Spec("a", CURRENT, 10, 1, 1), **{f"n{i}": Spec(f"n{i}", CURRENT, 10, 1, 1) for i in range(1, twin + 1)}}
    cache = build_cache(tmp_path / "c", specs)
    ambiguous = invoke(["show", first[0]], cache)
    assert ambiguous.exit_code == 1 and "ambiguous" in ambiguous.stderr and repr(first[0]) in ambiguous.stderr
    unknown = "f" * 31 if not any(k.startswith("f" * 31) for k in cache.keys.values()) else "0" * 31
    missing = invoke(["show", unknown], cache)
    assert missing.exit_code == 1 and unknown in missing.stderr and "graphcache: error:" in missing.stderr
    assert invoke(["show", "not-a-key"], cache).exit_code == 1


# -- purge ------------------------------------------------------------------------------------------------------
def test_purge_dry_run_deletes_nothing(cache):
    data = invoke_json(["purge", "--all", "--dry-run"], cache)
    assert data["dry_run"] is True and data["count"] == 5
    assert set(data["removed"]) == set(cache.keys.values())
    assert data["bytes"] == sum(cache.size(name) for name in SPECS)
    assert cache.present() == set(SPECS)
    human = invoke(["purge", "--older-than", "7d", "--dry-run"], cache)
    assert human.exit_code == 0 and "Would remove 3 entries" in human.stderr and "old-model" in human.stdout
    assert cache.present() == set(SPECS) and invoke_json(["stats"], cache)["entries"] == 5


def test_purge_stale_removes_exactly_other_versions(cache):
    old_bytes = cache.size("old-model") + cache.size("old-big")
    data = invoke_json(["purge", "--stale", "--yes"], cache)
    assert cache.names_of(data["removed"]) == {"old-model", "old-big"}
    assert data["count"] == 2 and data["bytes"] == old_bytes and data["dry_run"] is False
    assert cache.present() == {"small", "medium", "big"}
    assert {item["name"] for item in invoke_json(["ls"], cache)} == {"small", "medium", "big"}
    stats = invoke_json(["stats"], cache)
    assert [v["version"] for v in stats["versions"]] == [CURRENT]


def test_purge_older_than_and_filter(cache):
    data = invoke_json(["purge", "--older-than", "9d", "--yes"], cache)
    assert cache.names_of(data["removed"]) == {"medium", "old-model"}
    assert data["bytes"] > 200_000
    data = invoke_json(["purge", "--filter", "size>100kB", "--yes"], cache)
    assert cache.names_of(data["removed"]) == {"big", "old-big"}
    assert cache.present() == {"small"}


def test_purge_keys_by_prefix_and_unknown_key(cache):
    result = invoke(["purge", cache.keys["medium"][:12], "--yes"], cache)
    assert result.exit_code == 0 and "Removed 1 entry" in result.stderr
    assert cache.present() == set(SPECS) - {"medium"}
    unknown = "0" * 32 if cache.keys["small"] != "0" * 32 else "1" * 32
    result = invoke(["purge", cache.keys["small"], unknown, "--yes"], cache)
    assert result.exit_code == 1 and unknown in result.stderr
    assert cache.present() == set(SPECS) - {"medium"}  # nothing deleted when one key is unknown


@pytest.mark.parametrize("args", [[], ["--all", "--stale"], ["--all", "--older-than", "1d"], ["--older-than", "soon"]])
def test_purge_usage_errors(cache, args):
    result = invoke(["purge", "--yes", *args], cache)
    assert result.exit_code == 2 and "graphcache: error:" in result.stderr
    assert cache.present() == set(SPECS)


def test_purge_without_terminal_needs_yes(cache):
    result = invoke(["purge", "--all"], cache)
    assert result.exit_code == 1 and "--yes" in result.stderr
    assert cache.present() == set(SPECS)


def test_purge_asks_on_a_terminal(cache, monkeypatch):
    monkeypatch.setattr(output, "stdin_is_terminal", lambda: True)
    declined = invoke(["purge", "--stale"], cache, input="n\n")
    assert declined.exit_code == 1 and "[y/N]" in declined.stderr
    assert cache.present() == set(SPECS)
    accepted = invoke(["purge", "--stale"], cache, input="y\n")
    assert accepted.exit_code == 0 and "Removed 2 entries" in accepted.stderr
    assert cache.present() == {"small", "medium", "big"}


def test_purge_nothing_matching_is_success(cache):
    result = invoke(["purge", "--filter", "size>1TB"], cache)
    assert result.exit_code == 0 and "Nothing to purge" in result.stderr
    assert cache.present() == set(SPECS)


def test_one_prefix_resolver_serves_local_and_remote_keys():
    keys = [key_of(i) for i in range(40)]
    first = keys[0]
    twins = sorted(k for k in keys if k[0] == first[0])
    assert len(twins) > 1  # 40 keys over 16 leading digits: some share one
    assert resolve_prefix(first.upper() + " ", keys, "here") == first
    with pytest.raises(SelectionError, match="ambiguous: it matches .* remote entries") as info:
        resolve_prefix(first[0], keys, "s3://b/p", what="remote entry")
    assert twins[0] in str(info.value)
    with pytest.raises(SelectionError, match=r"no remote entry matches key 'ff+' in s3://b/p"):
        resolve_prefix("f" * 32, keys, "s3://b/p", what="remote entry")
    for bad in ("", "xyz", "0" * 33):
        with pytest.raises(SelectionError, match="is not a cache key"):
            resolve_prefix(bad, keys, "here")
    assert str(no_current_version("/c", "'version=current' has nothing to compare with")) == (
        "no current version is recorded in /c: 'version=current' has nothing to compare with "
        "(open the cache with GraphCache once, or name the keys)")


def test_progress_bar_steps_name_the_running_item():
    bar = Progress(console=Console(file=io.StringIO()), auto_refresh=False)
    steps = output.ProgressBar(bar, bar.add_task("Warming", total=3))
    steps.step("a.pb")
    steps.step("b.pb")
    task = bar.tasks[0]
    assert steps.shown and task.completed == 1 and task.description == "b.pb"
    steps.advance(2)
    assert task.completed == 3
    hidden = output.ProgressBar()
    hidden.step("a.pb")
    hidden.advance(5)
    assert not hidden.shown


# -- verify -----------------------------------------------------------------------------------------------------
def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_detects_and_fixes_a_bit_flip(cache):
    clean = invoke_json(["verify"], cache)
    assert {k: clean[k] for k in ("checked", "bad", "stray_temp_files", "fixed", "clean")} == {
        "checked": 5, "bad": [], "stray_temp_files": [], "fixed": False, "clean": True}
    flip_last_byte(cache.path("medium"))
    stray = cache.path("small").parent / f".{cache.keys['small']}.123.abcd.tmp"
    stray.write_bytes(b"partial")
    os.utime(stray, (time.time() - 7200, time.time() - 7200))
    found = invoke_json(["verify"], cache, exit_code=1)
    assert [bad["key"] for bad in found["bad"]] == [cache.keys["medium"]]
    assert "checksum" in found["bad"][0]["problem"] and found["stray_temp_files"] == [str(stray)]
    human = invoke(["verify"], cache)
    assert human.exit_code == 1 and cache.keys["medium"] in human.stdout and "verify --fix" in human.stderr
    assert cache.present() == set(SPECS) and stray.exists()
    fixed = invoke(["verify", "--fix"], cache)
    assert fixed.exit_code == 0 and "removed 1 bad entry" in fixed.stderr
    assert cache.present() == set(SPECS) - {"medium"} and not stray.exists()
    assert cache.keys["medium"] not in invoke(["ls", "-q"], cache).stdout
    assert invoke(["verify"], cache).exit_code == 0


def test_scan_progress_proxy_counts_the_first_scan_only(cache):
    steps: list[int] = []
    store = manage.ScanProgress(LocalStore(cache.root), steps.append)
    assert len(list(store.scan())) == 5 and steps == [1] * 5
    assert len(list(store.scan())) == 5 and steps == [1] * 5
    assert store.path_for(cache.keys["big"]) == cache.path("big")


# -- errors -----------------------------------------------------------------------------------------------------
def test_runtime_errors_are_one_line_unless_debugging(cache, monkeypatch):
    for suffix in ("", "-wal", "-shm"):  # an index of another schema (a corrupt one is rebuilt: test_index_healing)
        (cache.root / f"index.db{suffix}").unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(cache.root / "index.db")) as other:
        other.executescript("CREATE TABLE entries (key TEXT PRIMARY KEY); PRAGMA user_version = 99;")
    result = invoke(["stats"], cache)
    assert result.exit_code == 1
    assert result.stderr.startswith("graphcache: error:") and len(result.stderr.strip().splitlines()) == 1
    monkeypatch.setenv("GRAPHCACHE_DEBUG", "1")
    debug = invoke(["stats"], cache)
    assert debug.exit_code == 1 and "Traceback" in debug.stderr and "graphcache: error:" in debug.stderr


def test_main_returns_exit_codes_without_exiting(cache):
    assert cli.main(["ls", "-q", "--cache-dir", str(cache.root)], standalone_mode=False) == 0
    assert cli.main(["show", "0" * 31 + "g", "--cache-dir", str(cache.root)], standalone_mode=False) == 1
    assert cli.main(["purge", "--cache-dir", str(cache.root)], standalone_mode=False) == 2


# -- as a user runs it: real processes ----------------------------------------------------------------------------
def test_module_version_and_exit_codes(cache, tmp_path):
    version = run_module("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"graphcache {__version__}"
    usage = run_module("ls", "--filter", "size~3", "--cache-dir", str(cache.root))
    assert usage.returncode == 2 and "size~3" in usage.stderr
    unknown = run_module("show", "abcdef0123", "--cache-dir", str(cache.root))
    assert unknown.returncode == 1 and "abcdef0123" in unknown.stderr
    missing = run_module("ls", "--cache-dir", str(tmp_path / "absent"))
    assert missing.returncode == 0 and not (tmp_path / "absent").exists()


def test_module_purge_refuses_without_yes_when_stdin_is_not_a_terminal(cache):
    refused = run_module("purge", "--all", "--cache-dir", str(cache.root))
    assert refused.returncode == 1 and "--yes" in refused.stderr
    assert cache.present() == set(SPECS)
    done = run_module("purge", "--all", "--yes", "--json", "--cache-dir", str(cache.root))
    assert done.returncode == 0 and json.loads(done.stdout)["count"] == 5
    assert cache.present() == set()


def test_cli_never_imports_tensorflow(cache):
    code = textwrap.dedent(f"""
        import json, sys
        import graphcache.cli as cli
        root = {str(cache.root)!r}
        codes = [cli.main(args + ["--cache-dir", root], standalone_mode=False) for args in (
            ["stats", "--json"], ["ls", "--json"], ["ls", "--filter", "identity!=current"],
            ["show", {cache.keys["big"][:8]!r}], ["verify"], ["purge", "--stale", "--dry-run"], ["dir"])]
        print(json.dumps({{"codes": codes, "tf": sorted(m for m in sys.modules if m.startswith("tensorflow"))}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"codes": [0] * 7, "tf": []}
