"""The docs' example runner: the fenced examples of README.md and docs/*.md, run as they are written.

A page is one Markdown file; its examples are its fenced blocks, by the fence's language:

- ```python: run, in page order, in one namespace (a later block uses the names an earlier one made);
- ```console: every ``$ `` line (``\\`` continues it) is one command, run by bash, its exit status checked: 0,
  or N where the command's own comment says ``exits N``; the other lines are output shown to the reader and
  are not compared. As in one terminal, what a command exports and the directory it changes to carry on to
  the page's later commands (not to its Python blocks);
- ```text, or no language: shown, never run (an output, a directory layout, a diagram).

A shell example is a console block: ```sh, ```bash and ```shell are refused, so no command goes untested.
An HTML comment on the line just above a block (invisible where the page is rendered) changes what happens:

- ``<!-- not run: REASON -->``: the block is only shown (a GPU, a real bucket); the test counts and reports it;
- ``<!-- file: NAME -->``: the block is written to NAME in the page's dir (a script a later command runs).

A page says what its examples need once, on a line of its own: ``<!-- docs-test: needs model.pb savedmodel s3 -->``
(``NEEDS`` below). tests/test_docs.py prepares those in a fresh temp dir and runs
``python tests/docs_runner.py PAGE REPORT`` there, one process per page, ``GRAPHCACHE_DIR`` a fresh cache
dir; this module runs the blocks and writes one JSON line per block to REPORT, stopping at the first failure
(later blocks depend on it). Python tracebacks name the page and its line: a block is compiled with the
page's path as its file name and its own line numbers.

``python tests/docs_runner.py --setup DIR`` writes the shared files of ``NEEDS`` into DIR (once per test
session).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What a page may ask for, and what each is. Files are written once by ``setup`` and copied into each page's dir.
NEEDS = {
    "model.pb": "a frozen Keras MLP GraphDef (benchmarks.models.freeze_keras('mlp')): feed input:0 "
                "(float32, 1 x 32), fetch Identity:0 (1 x 10)",
    "savedmodel": "a tf.Module SavedModel: serving_default takes x (float32, None x 4) and returns y and total",
    "s3": "the S3 test server (tests/s3server.py, moto on loopback) holding an empty bucket my-bucket, the AWS_* "
          "environment pointing at it",
}
RUN_LANGUAGES = ("python", "console")
SHOWN_LANGUAGES = ("", "text")
REFUSED_LANGUAGES = ("sh", "bash", "shell", "zsh")  # a shell example is a console block, so it runs
COMMAND_TIMEOUT = 180.0

_FENCE = re.compile(r"^```([\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*(not run|file):\s*(.*?)\s*-->\s*$")
_NEEDS = re.compile(r"^<!--[ \t]*docs-test:[ \t]*needs[ \t]+(.*?)[ \t]*-->[ \t]*$", re.M)  # on a line of its own
_EXITS = re.compile(r"#.*\bexits (\d+)\b")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    not_run: str | None = None  # the reason, when marked not run
    file: str | None = None  # where the block is written instead of run

    @property
    def kind(self) -> str:
        if self.not_run is not None:
            return "not run"
        if self.file is not None:
            return "file"
        return self.language if self.language in RUN_LANGUAGES else "shown"


@dataclass(frozen=True)
class Page:
    path: Path
    blocks: tuple[Block, ...]
    needs: frozenset[str]

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


class PageError(ValueError):
    """A page the runner cannot read as examples (an unclosed fence, a refused language, an unknown need)."""


def pages() -> list[Path]:
    found = [ROOT / "README.md"]
    found += sorted((ROOT / "docs").glob("*.md"))
    return found


def parse(path: Path) -> Page:
    lines = path.read_text().splitlines()
    name = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    needs: set[str] = set()
    for match in _NEEDS.finditer("\n".join(lines)):
        needs.update(match.group(1).replace(",", " ").split())
    unknown = needs - set(NEEDS)
    if unknown:
        raise PageError(f"{name}: unknown docs-test needs {sorted(unknown)}; known: {sorted(NEEDS)}")
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        language, start = fence.group(1).lower(), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        if end is None:
            raise PageError(f"{name}:{start + 1}: a fence that is never closed")
        if language in REFUSED_LANGUAGES:
            raise PageError(f"{name}:{start + 1}: a ```{language} block; write shell examples as ```console "
                            "with `$ ` commands, so the docs test runs them")
        if language not in RUN_LANGUAGES + SHOWN_LANGUAGES:
            raise PageError(f"{name}:{start + 1}: a ```{language} block; the runner knows "
                            f"{', '.join(RUN_LANGUAGES + SHOWN_LANGUAGES[1:])} and bare fences")
        if any(line.startswith("```") for line in lines[start + 1:end]):
            raise PageError(f"{name}:{start + 1}: a fence inside this block (one left open above it?)")
        above = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        directive = _DIRECTIVE.match(above.strip())
        not_run = file = None
        if directive and directive.group(1) == "not run":
            not_run = directive.group(2)
            if not not_run:
                raise PageError(f"{name}:{start + 1}: `not run` needs its reason")
        elif directive:
            file = directive.group(2)
        blocks.append(Block(start + 1, language, "\n".join(lines[start + 1:end]), not_run, file))
        i = end + 1
    return Page(path, tuple(blocks), frozenset(needs))


def commands(block: Block) -> list[tuple[int, str, int]]:
    """A console block's commands: (line in the page, command, expected exit status)."""
    found = []
    pending: list[str] = []
    first = 0
    for offset, raw in enumerate(block.code.splitlines(), start=1):
        line = block.line + offset
        if pending:
            pending.append(raw)
        elif raw.startswith("$ "):
            pending, first = [raw[2:]], line
        else:
            continue  # output shown to the reader
        if not raw.endswith("\\"):
            command = "\n".join(pending)
            exits = _EXITS.search(command)
            found.append((first, command, int(exits.group(1)) if exits else 0))
            pending = []
    if pending:
        raise PageError(f"line {first}: a command whose last line ends with a backslash")
    return found


# -- running a page (in its own process) ------------------------------------------------------------------------
def run_page(page: Page, report: Path) -> int:
    namespace: dict = {"__name__": "__main__"}
    shell = Shell()
    with report.open("w") as out:
        for block in page.blocks:
            started = time.perf_counter()
            row = {"line": block.line, "kind": block.kind, "reason": block.not_run}
            error = None
            if block.kind == "python":
                error = _run_python(page, block, namespace)
            elif block.kind == "console":
                row["commands"] = 0
                for line, command, expected in commands(block):
                    row["commands"] += 1
                    error = _run_command(shell, line, command, expected)
                    if error:
                        row["line"] = line
                        break
            elif block.kind == "file":
                Path(block.file).write_text(block.code + "\n")
            row.update(seconds=round(time.perf_counter() - started, 3), error=error)
            out.write(json.dumps(row) + "\n")
            out.flush()
            if error:
                return 1
    return 0


def _run_python(page: Page, block: Block, namespace: dict) -> str | None:
    # Blank lines up to the block keep the page's line numbers in tracebacks.
    code = compile("\n" * block.line + block.code, page.name, "exec")
    try:
        exec(code, namespace)
    except BaseException:  # noqa: BLE001 -- SystemExit too: an example that exits has failed
        return traceback.format_exc(limit=-8)
    return None


class Shell:
    """One terminal's state across a page's commands: its exported variables and its directory."""

    def __init__(self) -> None:
        state = Path(tempfile.mkdtemp(prefix="docs-shell-"))
        self.env_file, self.cwd_file = state / "env", state / "cwd"
        self.env_file.write_text("")
        self.cwd_file.write_text(os.getcwd())

    def script(self, command: str) -> str:
        env, cwd = shlex.quote(str(self.env_file)), shlex.quote(str(self.cwd_file))
        return (f'source {env} && cd "$(cat {cwd})"\n{command}\n'
                f"status=$?\nexport -p > {env}\npwd > {cwd}\nexit $status\n")


def _run_command(shell: Shell, line: int, command: str, expected: int) -> str | None:
    try:
        proc = subprocess.run(["bash", "-c", shell.script(command)], capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"line {line}: `{command}` ran past {COMMAND_TIMEOUT:.0f} s"
    if proc.returncode == expected:
        return None
    return (f"line {line}: `{command}` exited {proc.returncode}, the page says {expected}\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")


# -- the shared files -----------------------------------------------------------------------------------------------
def setup(directory: Path) -> None:
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, str(ROOT))
    from benchmarks import models

    mlp = models.freeze_keras("mlp")
    assert (mlp.feeds, mlp.fetches) == (["input:0"], ["Identity:0"]), (mlp.feeds, mlp.fetches)
    (directory / "model.pb").write_bytes(mlp.graph_def.SerializeToString())

    class Model(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.nn.relu(tf.matmul(x, self.w)), "total": tf.reduce_sum(x, axis=1)}

    model = Model()
    tf.saved_model.save(model, str(directory / "savedmodel"), signatures={"serving_default": model.serve})


def main(argv: list[str]) -> int:
    if argv[:1] == ["--setup"]:
        setup(Path(argv[1]))
        return 0
    page, report = Path(argv[0]), Path(argv[1])
    sys.path[0] = os.getcwd()  # the examples import as a script in the page's dir would, not from tests/
    return run_page(parse(page if page.is_absolute() else ROOT / page), report)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.exit(main(sys.argv[1:]))

