"""The file container used as an attacker or a careless user would (no crash, no corruption,
nothing destroyed).

A crash is reproduced in a fresh interpreter, and the test asserts that it ended with a clean
exception rather than a signal; a hang is bounded by a timeout. Destinations of every kind are
drawn by hypothesis, with a bounded number of examples."""

import errno
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hurray
from conftest import peer

np = peer("numpy")


def run_python(code, *args, timeout=120):
    """Runs `code` in a fresh interpreter with `args` in sys.argv[1:]; returns its stdout. A
    signal (a crash) or a non-zero exit fails the test, naming what it printed."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode >= 0, f"killed by signal {-result.returncode}:\n{result.stderr}"
    assert result.returncode == 0, result.stderr
    return result.stdout


def listing(directory):
    return sorted(os.listdir(directory))


# ============================================================================================
# Mapped files
# ============================================================================================


def test_a_write_through_torch_into_a_loaded_tensor_reaches_neither_the_process_nor_the_file(
        tmp_path):
    """PyTorch ignores DLPack's read-only flag; the mapping is copy-on-write, so its in-place
    add changes a private copy: no SIGSEGV, and the file keeps its bytes."""
    peer("torch")
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": np.arange(1, 4, dtype=np.float32)})
    out = run_python("""
        import sys, hurray, torch
        loaded = hurray.load(sys.argv[1])["w"]
        t = torch.from_dlpack(loaded)
        t.add_(1)
        print(t.tolist())
        print(hurray.load(sys.argv[1], verify=True)["w"].tolist())
    """, path)
    assert out.split("\n")[:2] == ["[2.0, 3.0, 4.0]", "[1.0, 2.0, 3.0]"], out


@pytest.mark.parametrize("mmap", [True, False])
def test_verify_reports_a_file_that_shrank_instead_of_dying(tmp_path, mmap):
    """File.verify() on a file cut short after open reads with pread and raises; a mapped
    verify used to die of SIGBUS."""
    path = tmp_path / "s.hurray"
    hurray.save(path, {"a": np.arange(100_000, dtype=np.float64), "b": np.ones(10)})
    out = run_python("""
        import os, sys, hurray
        with hurray.open(sys.argv[1], mmap=sys.argv[2] == "True") as f:
            os.truncate(sys.argv[1], 100)
            try:
                f.verify()
            except hurray.InputOutputError as e:
                print("refused:", e)
    """, path, mmap)
    assert out.startswith("refused:") and "the file shrank" in out, out


# ============================================================================================
# Inputs and destinations that are not regular files
# ============================================================================================


def test_fifo_inputs_are_refused_at_once(tmp_path):
    """Opening a FIFO used to block for a writer before the regular-file check."""
    fifo = tmp_path / "f.hurray"
    os.mkfifo(fifo)
    out = run_python("""
        import sys, hurray
        fifo, out = sys.argv[1:]
        for call in (lambda: hurray.load(fifo), lambda: hurray.open(fifo),
                     lambda: hurray.load(fifo, mmap=False), lambda: hurray.convert(fifo, out)):
            try:
                call()
            except hurray.InputOutputError as e:
                print("refused:", e)
    """, fifo, tmp_path / "out.npz", timeout=60)
    assert out.count("refused:") == 4 and out.count("not a regular file") == 4, out
    assert listing(tmp_path) == ["f.hurray"]


KINDS = ["missing", "regular", "symlink", "dangling symlink", "fifo", "directory", "device",
         "read-only directory"]


def make_destination(root, kind):
    """A destination of `kind` under `root`: (the path to save to, the file a save writes or
    None if it must refuse)."""
    (root / "blobs").mkdir()
    dest = root / "model.hurray"
    if kind == "missing":
        return dest, dest
    if kind == "regular":
        dest.write_bytes(b"previous contents")
        return dest, dest
    if kind == "symlink":  # as in the Hugging Face cache: snapshot -> ../blobs/<hash>
        (root / "blobs" / "abc").write_bytes(b"previous contents")
        dest.symlink_to(Path("blobs") / "abc")
        return dest, root / "blobs" / "abc"
    if kind == "dangling symlink":
        dest.symlink_to(Path("blobs") / "new")
        return dest, root / "blobs" / "new"
    if kind == "fifo":
        os.mkfifo(dest)
    elif kind == "directory":
        dest.mkdir()
    elif kind == "device":
        try:  # a /dev/null of our own, where allowed (as root)
            os.mknod(dest, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            dest.symlink_to("/dev/null")
    elif kind == "read-only directory":
        locked = root / "locked"
        locked.mkdir()
        dest = locked / "model.hurray"
        locked.chmod(0o500)
        return dest, dest if os.access(locked, os.W_OK) else None  # root may write anyway
    return dest, None


def describe(path):
    """What is at `path` (not following symlinks), and a regular file's bytes."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return ("file", Path(path).read_bytes())
    return (stat.S_IFMT(mode), os.readlink(path) if stat.S_ISLNK(mode) else None)


def every_entry(root):
    return sorted(str(Path(d, n).relative_to(root)) for d, dirs, files in os.walk(root)
                  for n in dirs + files)


@settings(max_examples=int(os.environ.get("HURRAY_HYPOTHESIS_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), through_link=st.booleans(),
       size=st.integers(min_value=0, max_value=300_000))
def test_save_to_every_kind_of_destination(kind, through_link, size):
    """A save writes a regular file or a symlink's final target, atomically in the target's
    directory; it refuses anything else with a clear error and leaves it as it was. Either way
    no temporary is left behind."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        try:
            dest, written = make_destination(root, kind)
            if through_link:  # a symlink to whatever the destination is
                link = root / "link.hurray"
                link.symlink_to(dest)
                dest = link
            before = every_entry(root)
            kinds_before = {e: describe(root / e) for e in before}
            data = np.arange(size, dtype=np.uint8)
            if written is None:
                expected = (hurray.PermissionError if kind == "read-only directory"
                            else hurray.IsADirectoryError if kind == "directory"
                            else hurray.InputOutputError)
                with pytest.raises(expected) as refused:
                    hurray.save(dest, {"w": data})
                assert refused.value.errno in (None, errno.EACCES, errno.EISDIR)
                assert {e: describe(root / e) for e in every_entry(root)} == kinds_before
            else:
                hurray.save(dest, {"w": data})
                assert stat.S_ISREG(os.lstat(written).st_mode)
                assert bytes(hurray.load(dest, verify=True)["w"]) == data.tobytes()
                for e in before:  # every symlink is still the symlink it was
                    if kinds_before[e] is not None and kinds_before[e][0] == stat.S_IFLNK:
                        assert describe(root / e) == kinds_before[e]
                assert every_entry(root) == sorted(set(before) |
                                                   {str(written.relative_to(root))})
        finally:
            for d, dirs, _ in os.walk(root):
                for n in dirs:
                    os.chmod(os.path.join(d, n), 0o700)


# ============================================================================================
# Errors Python code catches by kind
# ============================================================================================


def test_missing_files_are_file_not_found_errors_with_errno_and_filename(tmp_path):
    missing = tmp_path / "missing.hurray"
    for call in (lambda: hurray.load(missing), lambda: hurray.open(missing),
                 lambda: hurray.load(missing, mmap=False)):
        with pytest.raises(FileNotFoundError) as caught:
            call()
        e = caught.value
        assert isinstance(e, hurray.FileNotFoundError) and isinstance(e, hurray.InputOutputError)
        assert (e.errno, e.filename, e.code) == (errno.ENOENT, missing, 15)
        assert "No such file or directory" in str(e)
    out = tmp_path / "out.hurray"
    with pytest.raises(FileNotFoundError) as caught:  # two paths, as os.rename names them
        hurray.convert(missing, out)
    assert (caught.value.filename, caught.value.filename2) == (missing, out)
    with pytest.raises(FileNotFoundError) as caught:  # the directory is missing
        hurray.save(tmp_path / "no" / "x.hurray", {"w": np.zeros(2)})
    assert caught.value.errno == errno.ENOENT
    (tmp_path / "plain").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        hurray.load(tmp_path / "plain" / "x.hurray")
    with pytest.raises(FileNotFoundError, match="holds no checkpoint index"):  # no checkpoint
        hurray.load(tmp_path)
    assert listing(tmp_path) == ["plain"]


def test_unreadable_files_are_permission_errors(tmp_path):
    """As a user who may not read the file (run as nobody when the tests run as root)."""
    path = tmp_path / "secret.hurray"
    hurray.save(path, {"w": np.zeros(2)})
    path.chmod(0)
    code = """
        import errno, os, sys, hurray
        if os.geteuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
        try:
            hurray.load(sys.argv[1])
        except PermissionError as e:
            assert isinstance(e, hurray.PermissionError) and e.errno == errno.EACCES, e
            assert e.filename == sys.argv[1], e.filename
            print("refused:", e)
    """
    out = run_python(code, path)
    assert out.startswith("refused:") and "Permission denied" in out, out


# ============================================================================================
# Metadata
# ============================================================================================


def test_numpy_scalar_metadata_keeps_its_kind(tmp_path):
    path = tmp_path / "m.hurray"
    metadata = {"flag": np.bool_(True), "off": np.False_, "n": np.int32(-3),
                "u": np.uint16(7), "f": np.float32(0.5), "d": np.float64(0.25)}
    hurray.save(path, {"w": np.zeros(1)}, metadata)
    with hurray.open(path) as f:
        got = f.metadata
    assert got == {"flag": True, "off": False, "n": -3, "u": 7, "f": 0.5, "d": 0.25}
    assert [type(got[k]) for k in ("flag", "off", "n", "u", "f", "d")] == \
           [bool, bool, int, int, float, float]


# ============================================================================================
# Saving memory another thread changes
# ============================================================================================


def test_a_save_racing_a_thread_that_mutates_the_array_still_verifies(tmp_path):
    """The checksum is of the bytes written, whatever the array holds a moment later."""
    data = np.zeros(32 << 20, np.uint8)
    stop = threading.Event()

    def mutate():
        while not stop.is_set():
            np.add(data, 1, out=data)  # releases the GIL, as save does

    thread = threading.Thread(target=mutate)
    thread.start()
    try:
        for i in range(4):
            path = tmp_path / f"racing{i}.hurray"
            hurray.save(path, {"w": data, "small": data[:1000]})
            hurray.load(path, verify=True)
    finally:
        stop.set()
        thread.join()
