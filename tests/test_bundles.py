"""Bundles: ``graphcache export`` / ``graphcache import`` (and bundles.py) carry entries between machines."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
import xxhash
import zstandard
from click.testing import CliRunner

from graphcache import cli
from graphcache.core.cachedir import CacheDir
from graphcache.entry.codec import EntryHeader, encode
from graphcache.share import bundles
from graphcache.share.bundles import (
    BundleError,
    BundleVersionError,
    CorruptBundleError,
    UnsafeBundleError,
    UntrustedBundleError,
    export_bundle,
    import_bundle,
)
from graphcache.store import LocalStore

from .helpers import ROOT

CURRENT = "tf2.21.0-aaaaaaaa"
OLD = "tf2.20.0-bbbbbbbb"


def key_of(name: str) -> str:
    return xxhash.xxh3_128_hexdigest(name.encode())


def put(root: Path, name: str, version: str, *, kind: str = "graph", payload: bytes | None = None,
        extra: dict | None = None) -> str:
    key = key_of(f"{name}/{version}")
    header = EntryHeader(key=key, version=version, identity={"version": version, "device": "cpu"}, name=name,
                         kind=kind, created=time.time(), compile_seconds=1.0, extra=extra or {})
    LocalStore(root).write(key, encode(header, payload if payload is not None else os.urandom(3000),
                                       compress=False))
    return key


def fake_cache(root: Path, *, current: str = CURRENT) -> dict[str, str]:
    """Entries of two versions and an alias (kind saved_model) pointing at a graph, without TensorFlow."""
    root.mkdir(parents=True, exist_ok=True)
    keys = {"a": put(root, "a", current), "b": put(root, "b", current), "old": put(root, "old", OLD)}
    keys["alias"] = put(root, "alias", current, kind="saved_model", payload=b"{}",
                        extra={"target": keys["a"]})
    cache = CacheDir(root)
    cache.index.record_version(OLD, {"tensorflow": "2.20.0"}, time.time() - 3600)
    cache.index.record_version(current, {"tensorflow": "2.21.0"})
    cache.reconcile()
    cache.index.close()
    return keys


def snapshot(root: Path) -> tuple[dict[str, bytes], list]:
    """Every entry file's bytes and the index rows: what an import must leave alone when it refuses."""
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
             if p.is_file() and "entries" in p.parts}
    rows = sorted((r.key, r.size) for r in CacheDir(root).entries()) if (root / "index.db").exists() else []
    return files, rows


def invoke(*args: str):
    return CliRunner().invoke(cli.cli, list(args))


def tar_zst(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], *,
            compress: bool = True) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    body = raw.getvalue()
    path.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(body) if compress else body)
    return path


def unpack(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes())).read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "source"
    return root, fake_cache(root)


@pytest.fixture
def target(tmp_path):
    """A cache dir of the current version holding one entry of its own."""
    root = tmp_path / "target"
    root.mkdir()
    own = put(root, "own", CURRENT)
    cache = CacheDir(root)
    cache.index.record_version(CURRENT, {})
    cache.reconcile()
    return root, own


# -- the real thing: compile, export, import into an empty dir, hit ------------------------------------------
def test_export_then_import_into_an_empty_dir_reproduces_hits(tmp_path, cache, mlp):
    import graphcache
    from graphcache import GraphCache

    from .test_saved_model import build_saved_model

    model = build_saved_model(tmp_path / "model")
    compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    served = graphcache.load_saved_model(model, cache=cache)
    assert served.wait()  # a SavedModel miss builds its entries in the background
    bundle = tmp_path / "out" / "cache.tar.zst"
    bundle.parent.mkdir()
    exported = invoke("export", str(bundle), "--json", "--cache-dir", str(cache.cache_dir))
    assert exported.exit_code == 0, exported.output
    summary = json.loads(exported.stdout)
    assert summary["count"] == 3 and summary["version"] == cache.version
    assert {e["kind"] for e in summary["entries"]} == {"graph", "saved_model"}

    empty = tmp_path / "new" / "cache"  # missing: import creates it, mode 0700
    imported = invoke("import", str(bundle), "--json", "--cache-dir", str(empty))
    assert imported.exit_code == 0, imported.output
    assert json.loads(imported.stdout)["count"] == 3
    assert stat.S_IMODE(empty.stat().st_mode) == 0o700
    assert CacheDir(empty).current_version() == cache.version

    fresh = GraphCache(empty)
    hit = fresh.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert hit.hit and hit.key == compiled.key
    assert graphcache.load_saved_model(model, cache=fresh).hit
    assert invoke("verify", "--cache-dir", str(empty)).exit_code == 0
    assert served.key in {e["key"] for e in summary["entries"]}

    again = invoke("import", str(bundle), "--json", "--cache-dir", str(empty))
    assert again.exit_code == 0 and json.loads(again.stdout)["count"] == 0
    assert len(json.loads(again.stdout)["present"]) == 3

    # through the Python API, a GraphCache knows its own version
    other = tmp_path / "other"
    other.mkdir()
    assert len(import_bundle(GraphCache(other), bundle).added) == 3


# -- export selection and the manifest -----------------------------------------------------------------------
def test_export_selects_the_current_version_and_takes_alias_targets(source, tmp_path):
    root, keys = source
    bundle = tmp_path / "all.tar.zst"
    summary = export_bundle(root, bundle)
    assert {e["key"] for e in summary.entries} == {keys["a"], keys["b"], keys["alias"]}
    manifest = bundles.read_manifest(bundle)
    assert manifest["format"] == "graphcache-bundle" and manifest["bundle_version"] == bundles.BUNDLE_VERSION
    assert manifest["version"] == CURRENT
    assert manifest["total_bytes"] == sum(e["size"] for e in manifest["entries"])
    members = unpack(bundle)
    assert members[0][0].name == "manifest.json"
    for info, data in members[1:]:
        record = next(e for e in manifest["entries"] if e["path"] == info.name)
        assert record["xxh3_128"] == xxhash.xxh3_128_hexdigest(data) and record["size"] == len(data)
    alias_record = next(e for e in manifest["entries"] if e["kind"] == "saved_model")
    assert alias_record["target"] == keys["a"]

    only_alias = export_bundle(root, tmp_path / "alias.tar.zst", [keys["alias"]])
    assert {e["key"] for e in only_alias.entries} == {keys["alias"], keys["a"]}  # the target comes along

    result = invoke("export", str(tmp_path / "b.tar.zst"), keys["b"][:10], "--json", "--cache-dir", str(root))
    assert result.exit_code == 0 and [e["key"] for e in json.loads(result.stdout)["entries"]] == [keys["b"]]
    result = invoke("export", str(tmp_path / "old.tar.zst"), "--filter", "identity!=current", "--cache-dir",
                    str(root))
    assert result.exit_code == 0 and bundles.read_manifest(tmp_path / "old.tar.zst")["version"] == OLD

    mixed = invoke("export", str(tmp_path / "mixed.tar.zst"), "--filter", "name=*", "--cache-dir", str(root))
    assert mixed.exit_code == 1 and "2 compiler versions" in mixed.stderr
    nothing = invoke("export", str(tmp_path / "none.tar.zst"), "--filter", "name=zzz",
                     "--cache-dir", str(root))
    assert nothing.exit_code == 1 and "no entries selected" in nothing.stderr
    assert not (tmp_path / "mixed.tar.zst").exists() and not (tmp_path / "none.tar.zst").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# -- refusals: nothing is written ----------------------------------------------------------------------------
def test_a_bundle_of_another_version_is_refused(source, target, tmp_path):
    root, keys = source
    bundle = export_bundle(root, tmp_path / "old.tar.zst", [keys["old"]]).path
    dest, _ = target
    before = snapshot(dest)
    with pytest.raises(BundleVersionError, match=f"{OLD}.*{CURRENT}"):
        import_bundle(dest, bundle)
    result = invoke("import", bundle, "--cache-dir", str(dest))
    assert result.exit_code == 1 and OLD in result.stderr and CURRENT in result.stderr
    assert snapshot(dest) == before


def _tamper_payload(members):
    info, data = members[1]
    flipped = bytearray(data)
    flipped[-10] ^= 0xFF
    members[1] = (info, bytes(flipped))
    return members


def _swap_keys(members):
    """Member bytes of one entry under another entry's name, manifest checksums adjusted to match."""
    manifest = json.loads(members[0][1])
    (first, data_1), (second, data_2) = members[1], members[2]
    members[1], members[2] = (first, data_2), (second, data_1)
    for record in manifest["entries"]:
        data = data_2 if record["path"] == first.name else data_1 if record["path"] == second.name else None
        if data is not None:
            record["size"], record["xxh3_128"] = len(data), xxhash.xxh3_128_hexdigest(data)
    members[0] = (members[0][0], json.dumps(manifest).encode())
    return members


def _drop_entry(members):
    return members[:-1]


def _extra_entry(members):
    return [*members, (member(f"entries/{key_of('stranger')}.gce"), members[1][1])]


def _manifest_not_first(members):
    return [*members[1:], members[0]]


@pytest.mark.parametrize("tamper, message", [
    (_tamper_payload, "fails its checksum"),
    (_swap_keys, "is corrupt: entry holds key"),
    (_drop_entry, "incomplete"),
    (_extra_entry, "not listed in the manifest"),
    (_manifest_not_first, "first member is not manifest.json"),
])
def test_a_tampered_bundle_is_refused(source, target, tmp_path, tamper, message):
    root, _ = source
    good = Path(export_bundle(root, tmp_path / "good.tar.zst").path)
    bad = tar_zst(tmp_path / "bad.tar.zst", tamper(unpack(good)))
    dest, _ = target
    before = snapshot(dest)
    with pytest.raises(CorruptBundleError, match=message):
        import_bundle(dest, bad)
    assert snapshot(dest) == before


def test_a_corrupt_truncated_or_foreign_file_is_refused(source, target, tmp_path):
    root, _ = source
    good = Path(export_bundle(root, tmp_path / "good.tar.zst").path).read_bytes()
    dest, _ = target
    before = snapshot(dest)
    cases = {
        "truncated": (good[: len(good) // 2], "truncated"),
        "flipped": (good[:200] + bytes([good[200] ^ 0x55]) + good[201:], "corrupt|checksum|not a valid"),
        "trailing": (good + b"junk", "after its end"),
        "random": (os.urandom(4096), "not a graphcache bundle"),
        "empty": (b"", "not a graphcache bundle"),
    }
    for name, (data, message) in cases.items():
        path = tmp_path / f"{name}.tar.zst"
        path.write_bytes(data)
        with pytest.raises(CorruptBundleError, match=message):
            import_bundle(dest, path)
        result = invoke("import", str(path), "--cache-dir", str(dest))
        assert result.exit_code == 1 and "graphcache: error:" in result.stderr, name
    plain_tar = tar_zst(tmp_path / "plain.tar", unpack(tmp_path / "good.tar.zst"), compress=False)
    with pytest.raises(CorruptBundleError, match="not zstd"):
        import_bundle(dest, plain_tar)
    not_tar = tmp_path / "notar.zst"
    not_tar.write_bytes(zstandard.ZstdCompressor().compress(b"hello" * 1000))
    with pytest.raises(CorruptBundleError, match="not a valid bundle|not a graphcache bundle"):
        import_bundle(dest, not_tar)
    assert snapshot(dest) == before


ESCAPES = {
    "dotdot": (lambda k: member("../evil.gce"), "outside the cache"),
    "dotdot-nested": (lambda k: member(f"entries/../../{k}.gce"), "outside the cache"),
    "absolute": (lambda k: member("/tmp/graphcache-evil.gce"), "absolute path"),
    "symlink": (lambda k: member(f"entries/{k}.gce", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    "hardlink": (lambda k: member(f"entries/{k}.gce", tarfile.LNKTYPE, "manifest.json"), "hard link"),
    "device": (lambda k: member(f"entries/{k}.gce", tarfile.CHRTYPE), "device"),
    "fifo": (lambda k: member(f"entries/{k}.gce", tarfile.FIFOTYPE), "device or FIFO"),
    "directory": (lambda k: member("entries", tarfile.DIRTYPE), "not a regular file"),
    "other-name": (lambda k: member("entries/notes.txt"), "neither manifest.json nor an entry"),
}


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_members_that_would_escape_the_cache_are_refused(source, target, tmp_path, case):
    root, _ = source
    good = unpack(Path(export_bundle(root, tmp_path / "good.tar.zst").path))
    make, message = ESCAPES[case]
    key = good[1][0].name.split("/")[1][:32]
    info = make(key)
    payload = good[1][1] if info.isreg() else None
    bad = tar_zst(tmp_path / "bad.tar.zst", [good[0], (info, payload), *good[1:]])
    dest, _ = target
    before = snapshot(dest)
    with pytest.raises(UnsafeBundleError, match=message):
        import_bundle(dest, bad)
    result = invoke("import", str(bad), "--cache-dir", str(dest))
    assert result.exit_code == 1 and "refused" in result.stderr
    assert snapshot(dest) == before
    assert not (dest.parent / "evil.gce").exists() and not Path("/tmp/graphcache-evil.gce").exists()


def test_a_failure_midway_removes_what_the_import_wrote(source, target, tmp_path, monkeypatch):
    root, _ = source
    bundle = export_bundle(root, tmp_path / "good.tar.zst").path
    dest, _ = target
    before = snapshot(dest)
    real_write = LocalStore.write
    calls = []

    def failing_write(self, key, data):
        calls.append(key)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, key, data)

    monkeypatch.setattr(LocalStore, "write", failing_write)
    with pytest.raises(OSError, match="No space"):
        import_bundle(dest, bundle)
    assert len(calls) == 2  # one entry was written before the failure, and removed again
    assert snapshot(dest) == before
    monkeypatch.setattr(LocalStore, "write", real_write)
    assert len(import_bundle(dest, bundle).added) == 3


def test_the_current_version_must_be_known(source, tmp_path):
    root, _ = source
    bundle = export_bundle(root, tmp_path / "b.tar.zst").path
    empty = tmp_path / "empty"
    with pytest.raises(BundleError, match="no current compiler version"):
        import_bundle(empty, bundle)
    assert stat.S_IMODE(empty.stat().st_mode) == 0o700 and not any(LocalStore(empty).scan())
    with pytest.raises(BundleVersionError, match=OLD):
        import_bundle(empty, bundle, version=OLD)
    summary = import_bundle(empty, bundle, version=CURRENT)
    assert len(summary.added) == 3 and CacheDir(empty).current_version() == CURRENT


def test_a_signing_key_refuses_unsigned_entries(source, target, tmp_path, monkeypatch):
    root, _ = source
    bundle = export_bundle(root, tmp_path / "b.tar.zst").path
    dest, _ = target
    before = snapshot(dest)
    monkeypatch.setenv("GRAPHCACHE_SIGNING_KEY", "s3cret")
    with pytest.raises(UntrustedBundleError, match="not signed"):
        import_bundle(dest, bundle)
    assert snapshot(dest) == before


def test_export_and_import_never_import_tensorflow(source, target, tmp_path):
    root, _ = source
    dest, _ = target
    code = textwrap.dedent(f"""
        import json, sys
        import graphcache.cli as cli
        codes = [cli.main(args, standalone_mode=False) for args in (
            ["export", {str(tmp_path / "b.tar.zst")!r}, "--cache-dir", {str(root)!r}],
            ["import", {str(tmp_path / "b.tar.zst")!r}, "--cache-dir", {str(dest)!r}])]
        tf = sorted(m for m in sys.modules if m.startswith("tensorflow"))
        print(json.dumps({{"codes": codes, "tf": tf}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"codes": [0, 0], "tf": []}
    assert len(CacheDir(dest).entries()) == 4
