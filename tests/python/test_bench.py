"""Every benchmark in bench/ still starts: a merge once left bench_engines.py importing a helper
that bench/timing.py no longer had, and nothing noticed until someone ran it. These tests time
nothing; they run each script's ``--help``, which imports it and everything it imports at the
top (bench/timing.py, hurray, NumPy)."""

import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("bench_*.py"))


def test_the_benches_are_found():
    assert len(SCRIPTS) >= 8, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_bench_starts(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout, done.stdout
