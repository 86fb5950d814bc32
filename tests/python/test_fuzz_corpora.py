"""The Python fuzz targets' corpora, replayed: every input that ever found a bug or new
coverage in fuzz/python/fuzz_*.py is checked again by the ordinary test run (atheris is only
needed to find new ones; scripts/test.sh runs each target for a few seconds)."""
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGETS = sorted((ROOT / "fuzz" / "python").glob("fuzz_*.py"))


def load(target):
    spec = importlib.util.spec_from_file_location(target.stem, target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus(target):
    name = "py_" + target.stem.removeprefix("fuzz_")
    return sorted((ROOT / "fuzz" / "corpus" / name).iterdir())


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.stem)
def test_corpus_replays(target):
    module = load(target)
    inputs = corpus(target)
    assert inputs, f"{target.name} has no corpus"
    for path in inputs:
        try:
            module.one_input(path.read_bytes())
        except Exception as error:
            raise AssertionError(f"{target.name} fails on {path.name}") from error
