"""Every benchmark in bench/ still starts: a merge once left bench_engines.py importing a helper
that bench/timing.py no longer had, and nothing noticed until someone ran it. These tests time
nothing; they run each script's ``--help``, which imports it and everything it imports at the
top (bench/timing.py, hurray, NumPy)."""

import os
import pathlib
import subprocess
import sys
import threading
import time

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


def _timing():
    sys.path.insert(0, str(BENCH))
    try:
        import timing
    finally:
        sys.path.remove(str(BENCH))
    return timing


def test_one_cpu_holds_every_thread_and_gives_each_its_cpus_back():
    """Small round trips are timed with the whole process on one CPU: a thread that was already
    running (as a server's is) must be moved too, not only the caller."""
    timing = _timing()
    allowed = os.sched_getaffinity(0)
    seen, ready, go, done = {}, threading.Event(), threading.Event(), threading.Event()

    def worker():
        ready.set()
        go.wait()
        seen["inside"] = os.sched_getaffinity(0)
        done.wait()
        seen["after"] = os.sched_getaffinity(0)

    started = threading.Thread(target=worker, daemon=True)
    started.start()
    try:
        ready.wait()
        with timing.one_cpu() as cpu:
            go.set()
            while "inside" not in seen:
                time.sleep(0.001)
            assert os.sched_getaffinity(0) == {cpu} and cpu in allowed
            assert seen["inside"] == {cpu}
            born = {}
            child = threading.Thread(
                target=lambda: born.setdefault("cpus", os.sched_getaffinity(0)))
            child.start()
            child.join()
            assert born["cpus"] == {cpu}
    finally:
        go.set()
        done.set()
        started.join(10)
    assert seen["after"] == allowed and os.sched_getaffinity(0) == allowed


def test_the_end_says_how_much_memory_the_host_took_back(tmp_path, monkeypatch, capsys):
    """On a VM with free page reporting, rounds after the host took freed memory back fault it
    in again (a 0.25 s fetch became 0.5-1.0 s); the benches' last line says it happened."""
    timing = _timing()
    counter = tmp_path / "reported_kib"
    monkeypatch.setattr(timing, "REPORTED_KIB", str(counter))
    counter.write_text("1000\n")
    timing.load_average("start")
    counter.write_text(str(1000 + 300 * 1024))
    timing.load_average("end")
    out = capsys.readouterr().out
    assert "gave 300 MiB of freed memory back to its host" in out
    counter.unlink()  # a machine without it: no such line
    timing.load_average("start")
    timing.load_average("end")
    assert "host" not in capsys.readouterr().out
