"""pickle, copy and Dask (ADR-043): a CPU tensor of any dtype and layout comes back with its
whole descriptor; pickle protocol 5 passes the bytes out of band, without a copy."""

import copy
import gc
import hashlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import hurray
from conftest import peer
from test_native_layouts import LAYOUTS

np = peer("numpy")
ml_dtypes = peer("ml_dtypes")


def descriptor(t, readonly=None):
    """Everything a tensor says about itself but where its bytes lie: layout, dtype, shape,
    strides, flags, each part's bytes, each buffer's role, device, memory class, sync state,
    alignment and read-only flag, each child recursively; every read-only flag `readonly`
    where that is given (what a tensor becomes over read-only memory)."""
    flag = (lambda own: own) if readonly is None else (lambda own: readonly)
    buffers = [{k: flag(v) if k == "readonly" else v for k, v in b.items()
                if k not in ("address", "byte_size")} for b in t.buffers]
    composite = t.layout == "composite"  # no arrays of its own: no strides, no device
    return (t.layout, t.dtype, t.shape, None if composite else t.strides, t.axis, t.block_size,
            t.coalesced, flag(t.readonly), None if composite else str(t.device), buffers,
            [(p.dtype, p.shape, p.strides, flag(p.readonly), p.tobytes()) for p in t.parts],
            {name: descriptor(child, readonly) for name, child in t.children.items()})


def per_channel_int4():
    """A per-channel int4 weight: packed values, float32 scales, int8 zero points."""
    values = hurray.Tensor(bytes(range(0x10, 0x1C)), hurray.dtype.int4, [4, 6])
    scales = hurray.Tensor(np.array([0.5, 1, 1.5, 2], np.float32).tobytes(), hurray.float32, [4])
    zeros = hurray.Tensor(bytearray([0, 1, 2, 3]), hurray.int8, [4])
    return hurray.Tensor.from_parts("per_channel", [values, scales, zeros], axis=0)


def bfloat16_tensor():
    arr = np.arange(24, dtype=np.float32).reshape(4, 6).astype(ml_dtypes.bfloat16)
    return hurray.from_numpy(arr[:, ::2])  # strided


CASES = {**LAYOUTS, "per_channel_int4": per_channel_int4, "bfloat16": bfloat16_tensor,
         "transposed": lambda: hurray.from_numpy(np.arange(12, dtype=np.int64).reshape(3, 4).T),
         "reversed": lambda: hurray.from_numpy(np.arange(6, dtype=np.float64)[::-1]),
         "0-d": lambda: hurray.from_numpy(np.array(2.5, np.float16)),
         "empty": lambda: hurray.Tensor(b"", hurray.complex64, [0, 3]),
         "odd int4": lambda: hurray.Tensor(b"\x21\x03", hurray.dtype.int4, [3]),
         "writable": lambda: hurray.Tensor(bytearray(8), hurray.dtype.float8_e4m3fn, [2, 4])}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_pickle_keeps_the_whole_descriptor(make, protocol):
    t = make()
    back = pickle.loads(pickle.dumps(t, protocol))
    assert descriptor(back) == descriptor(t)


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_copy_and_deepcopy_copy_the_bytes(make):
    t = make()
    for twin in (copy.copy(t), copy.deepcopy(t)):
        assert descriptor(twin) == descriptor(t)
        for p, q in zip(twin.parts, t.parts):
            assert p.size == 0 or \
                p.buffer_address + p.byte_offset != q.buffer_address + q.byte_offset


def test_protocol_5_passes_every_buffer_out_of_band_without_a_copy():
    t = per_channel_int4()
    buffers = []
    data = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 3 and all(isinstance(b, pickle.PickleBuffer) for b in buffers)
    assert len(data) < 512  # the descriptor only: no element bytes in band
    assert [bytes(b.raw()) for b in buffers] == [p.tobytes() for p in t.parts]
    back = pickle.loads(data, buffers=buffers)
    assert descriptor(back) == descriptor(t)
    for p, q in zip(back.parts, t.parts):  # the very same memory
        assert p.buffer_address + p.byte_offset == q.buffer_address + q.byte_offset
    expected = descriptor(t)
    del t, buffers  # the buffers keep the source's memory alive
    gc.collect()
    assert descriptor(back) == expected


def test_multiprocessing_pickles_the_bytes_in_band():
    """What getting-started.md says of multiprocessing: its pickler has no buffer_callback,
    so a tensor's bytes are copied into the pickle (no out-of-band route to promise)."""
    from multiprocessing.reduction import ForkingPickler
    t = hurray.Tensor(bytes(4 << 20), hurray.float32, [1 << 20])
    data = bytes(ForkingPickler.dumps(t))
    assert 4 << 20 < len(data) < (4 << 20) + 512
    assert pickle.loads(data).tobytes() == t.tobytes()


def test_read_only_is_kept_and_read_only_bytes_make_a_read_only_tensor():
    """As NumPy does (ADR-088): the bytes handed back are used, never copied; read-only ones
    (Ray's object store) make a read-only tensor, whatever the source was."""
    ro = hurray.Tensor(bytes(range(8)), hurray.uint8, [8])
    rw = hurray.Tensor(bytearray(range(8)), hurray.uint8, [8])
    for t in (ro, rw):
        buffers = []
        data = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
        for handed, readonly in ((buffers, t.readonly), ([bytes(b.raw()) for b in buffers], True),
                                 ([bytearray(b.raw()) for b in buffers], t.readonly)):
            back = pickle.loads(data, buffers=handed)
            assert back.readonly == readonly and back.tobytes() == t.tobytes()
            view = memoryview(handed[0])
            assert np.asarray(back).ctypes.data == np.frombuffer(view, np.uint8).ctypes.data


def test_device_tensors_are_refused():
    t = hurray.Tensor.from_address(0x1000, hurray.float32, [4], device=("cuda", 0),
                                   memory_class="host")
    with pytest.raises(hurray.BufferError, match="pickle needs CPU memory; the tensor is on cuda"):
        pickle.dumps(t)
    with pytest.raises(hurray.BufferError, match="pickle needs CPU memory"):
        copy.copy(t)


# ============================================================================================
# Dask: worker processes
# ============================================================================================


def dask_round_trip():
    """Sends a per-channel int4 tensor and a strided bfloat16 tensor to the worker processes of
    a two-process LocalCluster, computes on them there and checks what comes back."""
    import distributed

    sent = {"weight": per_channel_int4(), "activations": bfloat16_tensor()}

    def work(t):  # runs in a worker process
        import hashlib as h

        import numpy

        if t.layout == "per_channel":
            digest = h.sha256(b"".join(p.tobytes() for p in t.parts)).hexdigest()
            return t, digest
        return t, float(numpy.asarray(t).astype(numpy.float32).sum())

    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None, worker_dashboard_address=None) \
            as cluster, distributed.Client(cluster, timeout=60) as client:
        futures = {name: client.submit(work, t, pure=False) for name, t in sent.items()}
        results = {name: future.result(timeout=120) for name, future in futures.items()}
        pids = client.run(lambda: __import__("os").getpid())
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()

    weight, digest = results["weight"]
    assert descriptor(weight) == descriptor(sent["weight"])
    assert digest == hashlib.sha256(b"".join(p.tobytes() for p in sent["weight"].parts)).hexdigest()
    activations, total = results["activations"]
    assert descriptor(activations) == descriptor(sent["activations"])
    assert total == float(np.asarray(sent["activations"]).astype(np.float32).sum())


def test_dask_worker_processes_compute_on_tensors_and_send_them_back():
    peer("distributed")
    # In a fresh interpreter, so the cluster's threads, sockets and processes end with it.
    result = subprocess.run([sys.executable, "-c", "import test_pickle as t; t.dask_round_trip()"],
                            cwd=Path(__file__).parent, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
