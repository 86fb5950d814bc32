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
    monkeypatch.setattr(timing.time, "sleep", lambda s: None)
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
    assert "freed memory" not in capsys.readouterr().out


def test_a_table_names_the_rounds_in_which_the_host_took_memory_back(tmp_path, monkeypatch,
                                                                    capsys):
    """A contender whose freed memory the VM hands to its host right away (2 MiB page-cache
    blocks of the file it wrote last) pays for faulting it back in: the table says in which of
    its rounds that happened, and their median beside the others', so a raised median is
    attributed in the bench's own output."""
    timing = _timing()
    counter = tmp_path / "reported_kib"
    monkeypatch.setattr(timing, "REPORTED_KIB", str(counter))
    counter.write_text("0")
    calls = {"n": 0}

    def before(name):
        if name == "cold":  # every other call of "cold" finds 2 MiB given back
            calls["n"] += 1
            if calls["n"] % 2 == 0:
                counter.write_text(str(int(counter.read_text()) + 2048))

    samples = timing.interleaved({"warm": lambda: None, "cold": lambda: None}, 6,
                                 before=before)
    assert samples["warm"].returned == [0] * 6
    # The untimed warm-up call is the first; rounds 0, 2 and 4 are its 2nd, 4th and 6th.
    assert samples["cold"].returned == [2048, 0, 2048, 0, 2048, 0]
    table = timing.Table("t", refs=["warm"])
    table.add_all(samples)
    table.print()
    out = capsys.readouterr().out
    assert "cold: the machine gave 6 MiB of freed memory back to its host during 3 of 6 " \
        "rounds" in out
    assert "warm: the machine" not in out
    counter.unlink()  # a machine without the counter: no such line
    table = timing.Table("t")
    table.add_all(timing.interleaved({"x": lambda: None}, 5, before=before))
    table.print()
    assert "freed memory" not in capsys.readouterr().out


def test_a_run_is_judged_by_what_other_work_took_not_by_the_load_average(
        tmp_path, monkeypatch, capsys):
    """The load average counts the benchmark's own threads (and, for minutes, a benchmark that
    ran just before), so a run is judged by the CPU time others took: the kernel's busy time
    less this process's, in the second before the start and during the run."""
    timing = _timing()
    stat = tmp_path / "stat"
    monkeypatch.setattr(timing, "PROC_STAT", str(stat))
    tick = os.sysconf("SC_CLK_TCK")
    clock = iter([100.0, 101.0, 111.0, 200.0, 201.0, 211.0])
    monkeypatch.setattr(timing.time, "monotonic", lambda: next(clock))
    own = iter([5.0, 5.0, 15.0, 5.0, 5.0, 15.0])
    monkeypatch.setattr(timing.os, "times", lambda: os.times_result((next(own), 0, 0, 0, 0)))
    monkeypatch.setattr(timing.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setattr(timing.os, "cpu_count", lambda: 2)

    def cpu(busy, steal=0.0):  # user nice system idle iowait irq softirq steal
        stat.write_text(f"cpu  {round(busy * tick)} 0 0 1000 0 0 0 {round(steal * tick)} 0 0\n")

    during_the_second = []
    monkeypatch.setattr(timing.time, "sleep", lambda s: cpu(*during_the_second.pop()))
    cpu(0)
    during_the_second.append((0,))
    timing.load_average("start")
    cpu(10.5)  # 10 s of it this process's own, over 10 s on 2 CPUs
    timing.load_average("end")
    out = capsys.readouterr().out
    assert "in the second before the start (1 s on 2 CPUs): this benchmark 0.0 s, other work " \
           "0.0 s (0% of the machine)" in out
    assert "during the run (10 s on 2 CPUs): this benchmark 10.0 s, other work 0.5 s (2% of " \
           "the machine)" in out
    assert "WARNING" not in out  # a load average of 9 judges nothing
    cpu(0)
    during_the_second.append((1.5,))  # others kept 1.5 of the 2 CPUs busy
    timing.load_average("start")
    cpu(13.5, 1.5)
    timing.load_average("end")
    start, end = capsys.readouterr().out.split("# load average at the end")
    assert "WARNING: other work or the host took more than 5% of the machine in the second " \
           "before the start" in start
    assert "other work 2.0 s (10% of the machine), taken by the host (steal) 1.5 s (8%)" in end
    assert "WARNING: other work or the host took more than 5% of the machine during the run" \
           in end
