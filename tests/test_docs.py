"""The README and docs/: every example runs as written (tests/docs_runner.py), and the pages hold together.

One test per page runs its blocks in a fresh process, in a fresh temp dir, with ``GRAPHCACHE_DIR`` a fresh
cache dir and what the page declares it needs (``docs_runner.NEEDS``): a failure names the page and the
line. The selected pages start together, two at a time (``JOBS``), longest first; each test waits for its own. The other tests need no TensorFlow: the README's length, links and anchors between pages, every
page in the index, every setting and command documented, and the tables quoted from
benchmarks/results/RESULTS.md still being its words.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import docs_runner
from .helpers import record
from .s3server import FOREIGN_SETTINGS, s3_env

ROOT = docs_runner.ROOT
PAGES = docs_runner.pages()
README_MAX_LINES = 250
PAGE_TIMEOUT = 600
SERVER_MARGIN = 120  # seconds a page may spend on its S3 server's start and stop, beside its runner
RESULTS = ROOT / "benchmarks" / "results" / "RESULTS.md"
BUCKET = "my-bucket"  # the name the examples use; each page that needs s3 gets its own server
REMOTE_TIMEOUT = 120  # seconds, for the pages that use the S3 server (run_page says why)
JOBS = min(2, os.cpu_count() or 1)  # pages at a time

TALLY: dict[str, dict] = {}


def page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.fixture(scope="session")
def shared_files(tmp_path_factory) -> Path:
    """The files of docs_runner.NEEDS, written once, by a process of their own."""
    directory = tmp_path_factory.mktemp("docs-shared")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "docs_runner.py"), "--setup", str(directory)],
                          capture_output=True, text=True, env=env, timeout=PAGE_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return directory


def page_env(tmp_path: Path, base: dict[str, str]) -> dict[str, str]:
    env = {name: value for name, value in base.items()
           if not name.startswith(("GRAPHCACHE_", "FSSPEC_S3")) and name not in FOREIGN_SETTINGS}
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    venv_bin = str(Path(sys.executable).parent)  # `graphcache` and `python` are this venv's
    env.update(GRAPHCACHE_DIR=str(cache_dir), HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"),
               PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}", TF_CPP_MIN_LOG_LEVEL="3")
    return env


@dataclass(frozen=True)
class PageRun:
    page: docs_runner.Page
    rows: list[dict]
    returncode: int
    stderr: str


def run_page(path: Path, tmp_path: Path, shared_files: Path, base_env: dict[str, str]) -> PageRun:
    """One page's examples in a fresh process (docs_runner.py), in a fresh dir with what the page needs."""
    page = docs_runner.parse(path)
    work = tmp_path / "work"
    work.mkdir()
    env = page_env(tmp_path, base_env)
    for need in sorted(page.needs - {"s3"}):
        source = shared_files / need
        (shutil.copytree if source.is_dir() else shutil.copy)(source, work / need)
    server = None
    if "s3" in page.needs:
        from .s3server import S3Server

        server = S3Server()
        server.client().create_bucket(Bucket=BUCKET)
        env.update(s3_env(server.endpoint))
        # The remote timeout is for hung servers, which no page shows. Its default (5 s) covers a process's first
        # call, which imports s3fs and botocore, and this server answers from threads of the test process: on a
        # loaded machine that ran past 5 s, and the page's remote hit was a timed-out miss.
        env["GRAPHCACHE_REMOTE_TIMEOUT"] = str(REMOTE_TIMEOUT)
    report = tmp_path / "report.jsonl"
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "tests" / "docs_runner.py"), str(path), str(report)],
                              cwd=work, env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT)
    finally:
        if server:
            server.stop()
    rows = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    return PageRun(page, rows, proc.returncode, proc.stderr)


def expected_cost(path: Path) -> int:
    """Processes that import TensorFlow, roughly: most of a page's time, so the longest pages start first."""
    page = docs_runner.parse(path)
    heavy = sum(bool(re.match(r"(graphcache (warm|run|explain)|python) ", command))
                for block in page.blocks if block.kind == "console" for _, command, _ in docs_runner.commands(block))
    return heavy + any(block.kind == "python" for block in page.blocks) + ("s3" in page.needs)


@dataclass(frozen=True)
class PageJob:
    """A page queued for the pool: ``started`` is set when a worker takes it, ``future`` holds its PageRun."""

    started: threading.Event
    future: Future


def _start_and_run(started: threading.Event, *args) -> PageRun:
    started.set()
    return run_page(*args)


@pytest.fixture(scope="session")
def page_runs(request, tmp_path_factory, shared_files) -> Iterator[dict[Path, PageJob]]:
    """Every selected page, JOBS at a time (most of a page is TensorFlow's import, one core's work)."""
    selected = [item.callspec.params["path"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_examples_run"]
    base_env = dict(os.environ)  # read here: the tests running meanwhile change os.environ (conftest.py)
    pool = ThreadPoolExecutor(JOBS)
    jobs = {}
    for path in sorted(selected, key=expected_cost, reverse=True):
        started = threading.Event()
        jobs[path] = PageJob(started, pool.submit(_start_and_run, started, path, tmp_path_factory.mktemp("docs-page"),
                                                  shared_files, base_env))
    yield jobs
    pool.shutdown(cancel_futures=True)


def tally(page: docs_runner.Page, rows: list[dict]) -> None:
    TALLY[page.name] = {
        "python": sum(row["kind"] == "python" for row in rows),
        "commands": sum(row.get("commands", 0) for row in rows),
        "not run": [f"{page.name}:{row['line']} ({row['reason']})" for row in rows if row["kind"] == "not run"],
        "seconds": sum(row["seconds"] for row in rows),
    }
    not_run = [item for entry in TALLY.values() for item in entry["not run"]]
    record("docs examples", (
        f"{sum(e['python'] for e in TALLY.values())} python blocks and "
        f"{sum(e['commands'] for e in TALLY.values())} shell commands run on {len(TALLY)} pages "
        f"({sum(e['seconds'] for e in TALLY.values()):.0f} s of page time, {JOBS} at a time); "
        f"{len(not_run)} blocks not run" + (f": {'; '.join(not_run)}" if not_run else "")))


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_examples_run(path: Path, page_runs: dict[Path, PageJob]) -> None:
    # A page's own time is bounded from its start (its runner's timeout, PAGE_TIMEOUT, plus its S3 server's
    # start and stop); before that it waits for the pages ahead of it in the queue, each bounded the same way,
    # however long a loaded machine makes them. A fixed wait from the test's start counted that queue too.
    job = page_runs[path]
    assert job.started.wait(len(page_runs) * (PAGE_TIMEOUT + SERVER_MARGIN)), f"{page_id(path)} never started"
    run = job.future.result(timeout=PAGE_TIMEOUT + SERVER_MARGIN)
    tally(run.page, run.rows)
    failed = [row for row in run.rows if row["error"]]
    if failed:
        pytest.fail(f"{run.page.name}:{failed[0]['line']}: the example fails\n{failed[0]['error']}", pytrace=False)
    assert run.returncode == 0, f"{run.page.name}: the runner failed ({run.returncode}):\n{run.stderr[-4000:]}"
    assert len(run.rows) == len(run.page.blocks)


# -- the pages hold together ----------------------------------------------------------------------------------------
def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    top = "\n".join(lines[:30])
    assert "make demo" in top and "make test" in top


def test_every_page_parses_and_is_in_the_index() -> None:
    for path in PAGES:
        docs_runner.parse(path)  # raises on an unclosed fence, a ```sh block, an unknown need
    index = (ROOT / "docs" / "README.md").read_text()
    for path in PAGES:
        if path.parent.name == "docs" and path.name != "README.md":
            assert f"({path.name})" in index, f"docs/README.md does not link {path.name}"


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    in_fence = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def test_relative_links_resolve() -> None:
    broken = []
    for path in PAGES:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.exists():
                broken.append(f"{page_id(path)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page_id(path)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_setting_and_command_is_documented() -> None:
    settings = (ROOT / "docs" / "settings.md").read_text()
    names = set()
    for source in (ROOT / "graphcache").rglob("*.py"):
        names.update(re.findall(r"GRAPHCACHE_[A-Z][A-Z_]*[A-Z]", source.read_text()))
    missing = sorted(name for name in names if f"`{name}`" not in settings)
    assert not missing, f"docs/settings.md lacks {missing}"

    from graphcache import cli

    reference = (ROOT / "docs" / "cli.md").read_text()
    rows = [line for line in reference.splitlines() if line.startswith("| `")]
    undocumented = sorted(name for name in cli.cli.commands if not any(f"`{name}" in row for row in rows))
    assert not undocumented, f"docs/cli.md's command table lacks {undocumented}"


_QUOTE = re.compile(r"<!-- quoted from (benchmarks/results/[\w.-]+) -->\n(.*?)\n\n", re.S)


def test_quoted_tables_are_results_md_words() -> None:
    """A table a page marks as quoted is its results file's (RESULTS.md, corpus.txt, ...), line for line: a new
    `make bench` run means new quotes."""
    stale = []
    for path in PAGES:
        for source, quote in _QUOTE.findall(path.read_text()):
            results = set((ROOT / source).read_text().splitlines())
            stale += [f"{page_id(path)}: {line}" for line in quote.splitlines() if line not in results]
    assert not stale, "quoted lines their results file no longer has (copy the new ones):\n" + "\n".join(stale)
