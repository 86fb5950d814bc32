"""progress= of save, load, convert and File.verify: a callable(done, total) called in order from
0 to the total, True for a bar on a terminal's stderr, an exception raised by it never lost.
(Client.get and read: test_wire.py.)"""

import io
import sys

import numpy as np
import pytest

import hurray

TENSORS = {"a": np.arange(1000, dtype=np.float32), "b": np.ones((64, 64), dtype=np.int8)}
TOTAL = 4000 + 4096


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, done, total):
        self.calls.append((done, total))


def check_run(calls, total):
    """Starts at 0, never goes back, ends at the total, one total throughout."""
    assert calls[0] == (0, total)
    assert calls[-1] == (total, total)
    assert all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


@pytest.mark.parametrize("shards", [None, 5000])
def test_save_reports_every_tensor_from_zero_to_the_total(tmp_path, shards):
    p = Recorder()
    hurray.save(tmp_path / "m", TENSORS, max_shard_size=shards, progress=p)
    check_run(p.calls, TOTAL)
    assert len(p.calls) == 1 + len(TENSORS)


@pytest.mark.parametrize("mmap, verify, passes", [(True, False, 1), (False, False, 1),
                                                  (True, True, 1), (False, True, 2)])
def test_load_counts_each_pass_over_the_data(tmp_path, mmap, verify, passes):
    hurray.save(tmp_path / "m.hurray", TENSORS)
    p = Recorder()
    loaded = hurray.load(tmp_path / "m.hurray", mmap=mmap, verify=verify, progress=p)
    assert np.array_equal(np.asarray(loaded["a"]), TENSORS["a"])
    check_run(p.calls, TOTAL * passes)


def test_convert_and_verify_report_progress(tmp_path):
    hurray.save(tmp_path / "m.hurray", TENSORS)
    p = Recorder()
    hurray.convert(tmp_path / "m.hurray", tmp_path / "m.safetensors", progress=p)
    check_run(p.calls, TOTAL)
    hurray.save(tmp_path / "ck", TENSORS, max_shard_size=5000)
    with hurray.open(tmp_path / "ck") as f:
        p = Recorder()
        f.verify(progress=p)  # two shards: one run over both
        check_run(p.calls, TOTAL)
        p = Recorder()
        f.verify("b", progress=p)
        check_run(p.calls, 4096)


def test_an_exception_from_progress_abandons_the_save_and_is_raised(tmp_path):
    def stop(done, total):
        if done > 0:
            raise KeyboardInterrupt("enough")

    with pytest.raises(KeyboardInterrupt, match="enough"):
        hurray.save(tmp_path / "m.hurray", TENSORS, progress=stop)
    assert list(tmp_path.iterdir()) == []  # no file, no temporary
    hurray.save(tmp_path / "m.hurray", TENSORS)
    with pytest.raises(ZeroDivisionError):
        hurray.load(tmp_path / "m.hurray", mmap=False, progress=lambda d, t: 1 / 0)
    with hurray.open(tmp_path / "m.hurray") as f, pytest.raises(ZeroDivisionError):
        f.verify(progress=lambda d, t: 1 / 0)


def test_progress_that_is_not_callable_is_refused_naming_what_it_takes(tmp_path):
    for function, args in ((hurray.save, (tmp_path / "m.hurray", TENSORS)),
                           (hurray.convert, (tmp_path / "x.hurray", tmp_path / "y.hurray"))):
        with pytest.raises(TypeError, match=r"callable\(done, total\), True or None, not int"):
            function(*args, progress=3)
    assert list(tmp_path.iterdir()) == []


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_true_draws_a_bar_on_a_terminal_and_nothing_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    hurray.save(tmp_path / "m.hurray", TENSORS, progress=True)
    drawn = sys.stderr.getvalue()
    assert drawn.startswith("\r  0% 0 B of 7.9 KiB") and drawn.endswith("\r100% 7.9 KiB of 7.9 KiB\n")
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal: nothing drawn
    hurray.load(tmp_path / "m.hurray", progress=True)
    assert sys.stderr.getvalue() == ""
