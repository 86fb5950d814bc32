"""The user guide (docs/guide/*.md), the README and docs/impl/cli.md (whose examples are the
tool's output) run as written.

Each page's blocks run in the order the page gives them, in one namespace and in a fresh
temporary directory, as a reader copying them one after the other would: ```python blocks are
executed, ```pycon blocks are checked as doctests (their output compared), ```console blocks
are run by bash with the installed `hurray` command on PATH, each `$ ` line's output (stdout
and stderr, as a terminal shows them) compared with the lines the page shows under it (`...`
stands for any text); a `$ ... &` line starts a server that runs until the page is done. Other blocks (```sh install steps, ```c) are not run. A page's relative
links must name files that exist.
"""

import doctest
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import SANITIZED, peer, ray_servers_started

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(GUIDE.glob("*.md")) + [ROOT / "README.md", ROOT / "docs" / "impl" / "cli.md"]

BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```$", re.DOTALL | re.MULTILINE)
RUNNABLE = ("python", "pycon", "console")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def blocks(page):
    """(language, code, line number of the first code line) of every fenced block."""
    text = page.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1)
            for m in BLOCK.finditer(text)]


def cli_directory():
    """The directory of the `hurray` command `pip install .` put beside this interpreter."""
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if os.access(os.path.join(directory, "hurray"), os.X_OK):
            return directory
    found = shutil.which("hurray")
    assert found, "the hurray command is not installed (pip install . installs it)"
    return os.path.dirname(found)


def run_python(code, namespace, page, lineno):
    # Padded so that a traceback names the page's own line numbers.
    exec(compile("\n" * (lineno - 1) + code, str(page), "exec"), namespace)


def run_pycon(code, namespace, where, lineno):
    test = doctest.DocTestParser().get_doctest(code, namespace, where, where, lineno - 1)
    assert test.examples, f"{where}: a pycon block without examples"
    report = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    result = runner.run(test, out=report.append, clear_globs=False)
    namespace.update(test.globs)  # the DocTest ran in a copy of the namespace
    assert result.failed == 0, "".join(report)


def console_commands(code, where):
    """[(command, expected output)] of a console block: `$ ` lines and the lines under them."""
    commands = []
    for line in code.splitlines():
        if line.startswith("$ "):
            commands.append([line[2:], []])
        else:
            assert commands, f"{where}: output before the first `$ ` command"
            commands[-1][1].append(line)
    return [(command, "".join(out + "\n" for out in output)) for command, output in commands]


def run_console(code, where, cwd, background):
    """Runs a console block. A command ending in ` &` is a server: it is started, the lines the
    page shows under it (what it prints once ready) are read from it, and it is left running
    in `background` until the page is done."""
    env = dict(os.environ, PATH=cli_directory() + os.pathsep + os.environ.get("PATH", ""),
               LC_ALL="C", COLUMNS="100")
    checker = doctest.OutputChecker()
    for command, want in console_commands(code, where):
        if command.endswith(" &"):
            server = subprocess.Popen(["bash", "-c", "exec " + command[:-2]], cwd=cwd, env=env,
                                      text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT)
            background.append(server)
            got = "".join(server.stdout.readline() for _ in want.splitlines())
        else:
            done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            assert done.returncode == 0, \
                f"{where}: `{command}` exited {done.returncode}:\n{done.stdout}"
            got = done.stdout
        assert checker.check_output(want, got, FLAGS), (
            f"{where}: `{command}` printed\n{got}\nnot what the page shows:\n{want}")


def start_ray_as_this_stage_needs(monkeypatch):
    """Under the sanitizer stage, a page's `ray.init()` starts Ray's servers without the
    preloaded ASan runtime and gives the runtime back to its workers (conftest's
    `ray_servers_started`): as the page is written, a worker can die at its start there and
    the page's `ray.get` would wait for it forever. Elsewhere the page runs untouched."""
    ray = peer("ray")
    init = ray.init

    def init_for_this_stage(*args, **kwargs):
        with ray_servers_started() as runtime_env:
            return init(*args, runtime_env=runtime_env, **kwargs)

    monkeypatch.setattr(ray, "init", init_for_this_stage)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_page_runs_as_written(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if SANITIZED and "import ray" in page.read_text(encoding="utf-8"):
        start_ray_as_this_stage_needs(monkeypatch)
    namespace = {"__name__": "__guide__"}
    background = []
    ran = 0
    try:
        for language, code, lineno in blocks(page):
            where = f"{page.relative_to(ROOT)}:{lineno}"
            if language == "python":
                run_python(code, namespace, page, lineno)
            elif language == "pycon":
                run_pycon(code, namespace, where, lineno)
            elif language == "console":
                run_console(code, where, tmp_path, background)
            else:
                continue
            ran += 1
    finally:
        for server in background:
            server.terminate()
            server.communicate(timeout=30)
    assert ran or page == GUIDE / "README.md", f"{page.name} has no runnable block"


def test_the_guide_has_the_pages_it_promises():
    names = {page.name for page in GUIDE.glob("*.md")}
    assert {"README.md", "getting-started.md", "saving-and-loading.md", "converting.md",
            "checkpoints.md",
            "numpy-pytorch-jax.md", "computing.md", "quantised-weights.md", "native-protocol.md",
            "network.md", "beyond-one-process.md", "cli.md",
            "c.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_name_files_that_exist(page):
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.name} links to {target}, which does not exist"


def test_the_block_reader_sees_every_fenced_block():
    # A fence the pattern missed would silently never run: every opening fence of a runnable
    # language must be one of the blocks found.
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        fences = re.findall(r"^```(\w+)", text, re.MULTILINE)
        found = [language for language, _, _ in blocks(page)]
        assert [f for f in fences if f in RUNNABLE] == [f for f in found if f in RUNNABLE]


def test_the_adr_index_lists_every_decision():
    # 064, 102 and 103 were written without a row, so the index a reader starts from hid them.
    adr = ROOT / "docs" / "adr"
    index = (adr / "README.md").read_text(encoding="utf-8")
    records = sorted(p.name for p in adr.glob("[0-9][0-9][0-9]-*.md"))
    assert records
    assert [name for name in records if f"]({name})" not in index] == []
    for name in records:
        title = (adr / name).read_text(encoding="utf-8").splitlines()[0]
        assert title.startswith(f"# ADR-{name[:3]}: "), f"{name} is titled {title!r}"
