"""Dask (ADR-088): tensors travel as Dask's own messages (the dask_serialize family), header and
frames over the tensor's memory; Dask arrays over tensors and over Hurray files, a file's rows
read through File.slice only as chunks ask; a two-process LocalCluster and a 1 GiB file."""

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hurray
from conftest import peer
from test_pickle import CASES, descriptor

np = peer("numpy")
da = peer("dask.array")
distributed = peer("distributed")
from distributed.protocol import deserialize, dumps, loads, serialize, to_serialize  # noqa: E402

from hurray._dask import FileRows  # noqa: E402

HERE = Path(__file__).parent


def run_python(code, timeout=300):
    """`code` in a fresh interpreter beside these tests (clusters and RSS end with it)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=HERE,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# ============================================================================================
# The serializer family
# ============================================================================================


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_dask_serializer_keeps_the_whole_descriptor(make):
    t = make()
    header, frames = serialize(t, serializers=["dask"])
    assert header["serializer"] == "dask" and header["type"] == "hurray.Tensor"
    assert descriptor(deserialize(header, frames)) == descriptor(t)
    # The whole message path: msgpack headers, frames split and merged.
    assert descriptor(loads(dumps({"x": to_serialize(t)}))["x"]) == descriptor(t)


@pytest.mark.parametrize("order", ["import hurray, distributed", "import distributed, hurray"])
def test_registered_whichever_is_imported_first(order):
    run_python(f"""
        {order}
        from distributed.protocol import serialize
        header, _ = serialize(hurray.Tensor(bytes(4), hurray.float32, [1]), serializers=["dask"])
        assert header["serializer"] == "dask"
        """, timeout=120)


def test_frames_are_the_tensors_memory_both_ways():
    values = np.arange(1 << 16, dtype=np.float32)
    t = hurray.from_numpy(values)
    header, frames = serialize(t, serializers=["dask"])
    assert len(frames) == 1 and np.asarray(frames[0]).ctypes.data == values.ctypes.data
    received = [bytearray(frame) for frame in frames]  # what a comm reads into
    back = deserialize(header, received)
    assert np.asarray(back).ctypes.data == np.frombuffer(received[0], np.uint8).ctypes.data
    assert not back.readonly


def test_read_only_stays_read_only_and_writable_gets_a_copy_of_read_only_frames():
    frozen = hurray.Tensor(np.arange(4, dtype=np.int32).tobytes(), hurray.int32, [4])
    header, frames = serialize(frozen, serializers=["dask"])
    back = deserialize(header, [bytearray(f) for f in frames])
    assert back.readonly and back.tolist() == [0, 1, 2, 3]
    writable = hurray.from_numpy(np.arange(4, dtype=np.int32))
    header, frames = serialize(writable, serializers=["dask"])
    sent = bytes(frames[0])
    back = deserialize(header, [sent])
    assert not back.readonly and back.tolist() == [0, 1, 2, 3]
    np.asarray(back)[0] = 7  # its own copy: the frame is untouched
    assert sent[:4] == bytes(4)


def test_dask_counts_a_tensors_bytes():
    from dask.sizeof import sizeof

    assert sizeof(hurray.from_numpy(np.zeros((256, 1024), np.float32))) == 1 << 20
    assert sizeof(CASES["per_channel_int4"]()) == 12 + 16 + 4


# ============================================================================================
# Dask arrays
# ============================================================================================


def test_from_array_over_a_tensor():
    values = np.arange(24, dtype=np.int64).reshape(4, 6)
    d = da.from_array(hurray.from_numpy(values), chunks=(3, 4))
    assert int(d.sum().compute()) == int(values.sum())
    np.testing.assert_array_equal(d.T[1:, ::2].compute(), values.T[1:, ::2])


@pytest.fixture
def saved(tmp_path):
    values = np.arange(120, dtype=np.float32).reshape(20, 6)
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": values, "q": CASES["per_channel_int4"]()})
    return path, values


def test_file_dask_reads_every_selection_as_numpy_does(saved):
    path, values = saved
    with hurray.open(path) as f:
        d = f.dask("w", chunks=(7, 4))
        assert (d.shape, d.dtype, d.chunks) == ((20, 6), np.float32, ((7, 7, 6), (4, 2)))
        assert float(d.sum().compute()) == float(values.sum())
        direct = FileRows(path, "w")
        for index in [np.s_[::-1], np.s_[15:2:-3], np.s_[2:8:-1], np.s_[5:3], np.s_[3],
                      np.s_[-1, 2:], np.s_[..., 1], np.s_[1:4, ::2], np.s_[()]]:
            np.testing.assert_array_equal(direct[index], values[index])
        with pytest.raises(IndexError):
            direct[20]


def test_file_dask_refuses_what_is_not_rows(saved):
    path, _ = saved
    with hurray.open(path) as f:
        with pytest.raises(hurray.UnsupportedError, match="per_channel"):
            f.dask("q")
        with pytest.raises(KeyError):
            f.dask("absent")
    with pytest.raises(hurray.StateError):
        f.dask("w")


def test_a_file_dask_array_pickles_to_the_path_not_the_bytes(saved):
    path, values = saved
    with hurray.open(path) as f:
        d = f.dask("w", chunks=5)
    data = pickle.dumps(d)
    assert str(path).encode() in data and values.tobytes()[:64] not in data
    np.testing.assert_array_equal(pickle.loads(data).compute(), values)  # opens the file again


# ============================================================================================
# A two-process LocalCluster
# ============================================================================================


def cluster_round_trip(path):
    """Every case through scatter/gather, task arguments and returns, on two worker processes
    that name the serializer they use; a file's Dask array summed on the workers."""
    import numpy

    sent = {name: make() for name, make in CASES.items()}

    def check(t):  # in a worker: the serializer family it would send t back with, and t
        from distributed.protocol import serialize as ser

        return ser(t)[0]["serializer"], t

    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None, worker_dashboard_address=None) \
            as cluster, distributed.Client(cluster, timeout=60) as client:
        pids = client.run(os.getpid)
        assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
        scattered = client.scatter(sent)
        gathered = client.gather(scattered)
        returned = client.gather({name: client.submit(check, t, pure=False)
                                  for name, t in sent.items()})
        with hurray.open(path) as f:
            total = f.dask("w", chunks=(7, 6)).sum().compute()
    for name, t in sent.items():
        assert descriptor(gathered[name]) == descriptor(t), name
        family, back = returned[name]
        assert family == "dask" and descriptor(back) == descriptor(t), name
    assert float(total) == float(numpy.arange(120, dtype=numpy.float32).sum())


def test_two_worker_processes_keep_every_descriptor(saved):
    run_python(f"import test_dask as t; t.cluster_round_trip({str(saved[0])!r})")


# ============================================================================================
# A 1 GiB file summed in bounded memory
# ============================================================================================

GIB_ROWS, GIB_COLUMNS = 1 << 18, 1024  # float32: 1 GiB
MARKED = np.arange(0, GIB_ROWS, 4096)  # rows holding their number; the others are zeros


@pytest.fixture(scope="module")
def gib_file(tmp_path_factory):
    """A 1 GiB file written from zero pages (calloc) with a few rows marked: the writer's
    memory stays small."""
    values = np.zeros((GIB_ROWS, GIB_COLUMNS), np.float32)
    values[MARKED] = MARKED[:, None]
    path = tmp_path_factory.mktemp("gib") / "big.hurray"
    hurray.save(path, {"w": hurray.from_numpy(values)}, durable=False)
    del values
    assert path.stat().st_size >= 1 << 30
    yield path
    path.unlink()


PEAK_RSS = """
    import resource, sys
    import dask, dask.array, numpy, hurray
    dask.config.set(scheduler="threads", num_workers=2)
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    before = peak()
    with hurray.open(sys.argv[1]) as f:
        total = float({array}.sum(dtype=numpy.float64).compute())
    print(total, peak() - before)
"""


def peak_rss(path, array):
    code = textwrap.dedent(PEAK_RSS).format(array=array)
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                            text=True, timeout=300, cwd=HERE)
    assert result.returncode == 0, result.stderr
    total, grown = result.stdout.split()
    return float(total), int(grown)


def test_a_dask_sum_over_a_1_gib_file_holds_only_the_chunks_in_flight(gib_file):
    expected = float(MARKED.sum() * GIB_COLUMNS)
    total, grown = peak_rss(gib_file, 'f.dask("w", chunks=(8192, 1024))')  # 32 MiB chunks
    assert total == expected
    assert grown < 256 << 20, f"RSS grew {grown >> 20} MiB over a 1 GiB file"
    # Through the one mapping of the whole file, chunked alike, the sum is the same; how many of
    # its pages stay resident is the kernel's choice (0 to 890 MiB seen), so it is not asserted
    total, _ = peak_rss(gib_file, 'dask.array.from_array(f["w"], chunks=(8192, 1024))')
    assert total == expected
