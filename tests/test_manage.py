"""The Python management API (CacheDir / GraphCache): purge selections shared with the CLI."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner

from graphcache.cli import cli
from graphcache.core.cachedir import CacheDir

from .test_eviction import _fill, _key


def test_purge_max_size_keeps_most_recently_used(tmp_path):
    cache = _fill(tmp_path, 6)
    size = cache.index.get(_key(0)).size
    cache.index.touch(_key(1), 9000.0)
    plan = cache.plan_purge(max_size=2 * size)
    assert {row.key for row in plan} == {_key(0), _key(2), _key(3), _key(4)}
    result = cache.purge(max_size=2 * size)
    assert result.entries == 4 and result.bytes == 4 * size and set(result.keys) == {r.key for r in plan}
    assert {row.key for row in cache.entries()} == {_key(1), _key(5)}


def test_purge_older_than_filters_and_dry_run(tmp_path):
    cache = _fill(tmp_path, 5)
    now = 2004.5  # entry i last used at 2000 + i
    assert {r.key for r in cache.plan_purge(older_than=2, now=now)} == {_key(0), _key(1), _key(2)}
    assert {r.key for r in cache.plan_purge(filters=["name=e3"], now=now)} == {_key(3)}
    assert {r.key for r in cache.plan_purge(older_than=2, filters=["name!=e0"], now=now)} == {_key(1), _key(2)}
    dry = cache.purge(all=True, dry_run=True)
    assert dry.entries == 5 and len(cache.entries()) == 5
    assert cache.purge(keys=[_key(4), "f" * 32]).keys == (_key(4),)


def test_purge_stale_removes_exactly_other_versions(tmp_path):
    cache = _fill(tmp_path, 3, version="old-version")
    (tmp_path / "empty").mkdir()
    assert _fill(tmp_path / "empty", 0).purge(stale=True).entries == 0
    cache.index.record_version("current-version", {}, time.time() + 60)  # opened after old-version
    result = cache.purge(stale=True)
    assert result.entries == 3 and result.versions == ("old-version",)
    assert cache.stats().bytes_evicted == result.bytes > 0


def test_cli_purge_max_size(tmp_path):
    cache = _fill(tmp_path, 4)
    size = cache.index.get(_key(0)).size
    runner = CliRunner()
    dry = runner.invoke(cli, ["--cache-dir", str(tmp_path), "purge", "--max-size", str(size), "--dry-run",
                              "--json"])
    assert dry.exit_code == 0, dry.output
    assert set(json.loads(dry.stdout)["removed"]) == {_key(0), _key(1), _key(2)}
    done = runner.invoke(cli, ["--cache-dir", str(tmp_path), "purge", "--max-size", str(size), "--yes", "--json"])
    assert done.exit_code == 0 and json.loads(done.stdout)["count"] == 3
    assert [row.key for row in CacheDir(tmp_path).entries()] == [_key(3)]
    bad = runner.invoke(cli, ["--cache-dir", str(tmp_path), "purge", "--max-size", "lots", "--yes"])
    assert bad.exit_code == 2 and "lots" in bad.output
