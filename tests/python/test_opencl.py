"""OpenCL memory (tag 0x08) through every path hurray-python has, on a real OpenCL device: PoCL
on the CPU in CI (scripts/setup.sh installs it), through the device backend of hurray-core
(ADR-047) and Tensor.to_device (ADR-048). Every value is checked by reading device memory back,
with pyopencl or through Hurray's own copy. Without an OpenCL runtime the tests are skipped,
except under HURRAY_REQUIRE_OPENCL=1 (scripts/test.sh), where they fail."""

import gc
import os
import shutil
import time

import numpy as np
import pytest

import hurray
from conftest import peer, run_isolated

cl = peer("pyopencl")

REQUIRE_OPENCL = os.environ.get("HURRAY_REQUIRE_OPENCL") == "1"


@pytest.fixture(scope="module")
def ctx():
    try:
        return cl.Context(devices=[cl.get_platforms()[0].get_devices()[0]])
    except (cl.Error, IndexError) as error:
        if REQUIRE_OPENCL:
            pytest.fail(f"OpenCL is required here: {error}")
        pytest.skip(f"no OpenCL device: {error}")


@pytest.fixture
def queue(ctx):
    return cl.CommandQueue(ctx)


def cl_buffer(ctx, array):
    return cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=array)


def wrap(buf, array, **kwargs):
    """A Hurray tensor over a pyopencl buffer holding `array`, kept alive by `owner`."""
    kwargs.setdefault("owner", buf)
    return hurray.Tensor.from_address(buf.int_ptr, array.dtype.name, array.shape,
                                      device="opencl", byte_size=buf.size, **kwargs)


def read_back(queue, tensor, like):
    """The bytes of an OpenCL tensor, read by pyopencl from the cl_mem the tensor carries."""
    buf = cl.Buffer.from_int_ptr(tensor.buffer_address, retain=True)
    out = np.empty_like(like)
    cl.enqueue_copy(queue, out, buf, src_offset=tensor.byte_offset, is_blocking=True)
    return out


def settled(obj, info):
    """A reference count once the runtime's own references are gone: PoCL holds some while a
    command that used the object is in flight and drops them on a thread of its own after it
    completed. Polls for up to two seconds while the count is above 1."""
    count = obj.get_info(info)
    for _ in range(200):
        if count <= 1:
            break
        time.sleep(0.01)
        count = obj.get_info(info)
    return count


class NoSync:
    """A consumer that takes `tensor` with its sync state, synchronising itself:
    __hurray__(stream=-1). Without it the producer waits for pending data (ADR-054)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __hurray__(self, stream=None):
        return self.tensor.__hurray__(stream=-1)


def host(tensor):
    """A CPU tensor as the NumPy array of its elements."""
    return np.asarray(tensor.__array__())


def test_pyopencl_to_hurray_to_pyopencl(ctx, queue):
    values = np.arange(24, dtype=np.float32).reshape(4, 6) * 0.5
    buf = cl_buffer(ctx, values)
    tensor = wrap(buf, values)
    received = hurray.from_hurray(tensor)  # zero-copy: the same cl_mem
    assert received.device == hurray.Device("opencl", 0)
    assert received.buffer_address == buf.int_ptr
    assert received.buffers[0]["address"] == buf.int_ptr
    np.testing.assert_array_equal(read_back(queue, received, values), values)
    # ... and through Hurray's own copies, on the caller's queue and on one of the memory's
    np.testing.assert_array_equal(host(received.to_device("cpu", stream=queue.int_ptr)), values)
    np.testing.assert_array_equal(host(received.to_device("cpu")), values)


def test_to_device_both_ways(ctx, queue):
    values = np.arange(-50, 50, dtype=np.int16).reshape(10, 10)
    on_device = hurray.from_numpy(values).to_device(hurray.Device("opencl", 0),
                                                    stream=queue.int_ptr)
    assert on_device.device == hurray.Device("opencl", 0)
    assert on_device.sync_mode == "ready"
    assert on_device.buffers[0]["alignment"] == max(64, ctx.devices[0].mem_base_addr_align // 8)
    np.testing.assert_array_equal(read_back(queue, on_device, values), values)  # pyopencl reads it
    back = on_device.to_device("cpu")
    assert back.device == hurray.Device("cpu", 0)
    np.testing.assert_array_equal(host(back), values)
    # the backend's default context of device 0, when no queue is given
    again = hurray.from_numpy(values * 3).to_device("opencl:0")
    np.testing.assert_array_equal(host(again.to_device("cpu")), values * 3)


def test_to_device_keeps_strides_and_cuts_buffers_to_the_arrays(ctx, queue):
    """A copy's buffer holds the bytes its arrays span (ADR-066): the bytes before NumPy's data,
    there only to round the buffer's start down to 64 (ADR-008), are not copied."""
    values = np.arange(48, dtype=np.float64).reshape(6, 8)[1:, ::3]  # strided, offset
    source = hurray.from_numpy(values)
    on_device = source.to_device("opencl", stream=queue.int_ptr)
    assert on_device.strides == source.strides
    assert on_device.byte_offset == 0
    assert on_device.buffers[0]["byte_size"] == (4 * 8 + 2 * 3 + 1) * 8  # the span, no more
    back = on_device.to_device("cpu")
    assert back.byte_offset == 0 and back.buffers[0]["byte_size"] == (4 * 8 + 2 * 3 + 1) * 8
    np.testing.assert_array_equal(host(back), values)
    # negative strides: element 0 is the span's last, its offset keeps its alignment (8)
    reversed_ = np.arange(100, dtype=np.float64)[::-1]
    on_device = hurray.from_numpy(reversed_).to_device("opencl", stream=queue.int_ptr)
    assert on_device.byte_offset == 99 * 8 and on_device.buffers[0]["byte_size"] == 100 * 8
    np.testing.assert_array_equal(host(on_device.to_device("cpu")), reversed_)
    # an empty tensor gets an empty buffer
    empty = hurray.from_numpy(np.zeros((0, 3), np.float32)).to_device("opencl")
    assert empty.shape == (0, 3) and empty.buffers[0]["byte_size"] == 0
    assert host(empty.to_device("cpu")).shape == (0, 3)


def test_to_device_keeps_each_arrays_alignment_in_a_shared_buffer(ctx, queue, peer_ext):
    """Two arrays in one buffer, from bytes 80 and 96 (offsets aligned to 16 and 32): the copy
    starts at byte 64, the first array's byte rounded down to 32, so that each array keeps its
    address modulo 64; the 16 bytes before it, which no array addresses, are zero."""
    source = hurray.from_hurray(peer_ext.make("mixed"))
    reference = hurray.from_hurray(peer_ext.make("per_channel"))
    assert source.buffers[0]["byte_size"] == 112
    on_device = source.to_device("opencl", stream=queue.int_ptr)
    assert on_device.buffers[0]["byte_size"] == 48
    assert [part.byte_offset for part in on_device.parts] == [16, 32]
    whole = hurray.Tensor.from_address(on_device.buffer_address, "uint8", [48], device="opencl",
                                       owner=on_device)
    assert not read_back(queue, whole, np.empty(48, np.uint8))[:16].any()  # zeros, not 0xEE
    back = on_device.to_device("cpu")  # from the device: the gap is zeroed on the host
    assert back.buffers[0]["byte_size"] == 48
    assert [part.byte_offset for part in back.parts] == [16, 32]
    for got, want in zip(back.parts, reference.parts):
        assert got.tobytes() == want.tobytes()
    whole = hurray.Tensor.from_address(back.buffers[0]["address"], "uint8", [48], device="cpu",
                                       owner=back)
    assert not host(whole)[:16].any()


def test_to_device_where_the_tensor_is_returns_it(ctx):
    cpu = hurray.from_numpy(np.ones(3, np.float32))
    assert cpu.to_device("cpu") is cpu
    on_device = cpu.to_device("opencl")
    assert on_device.to_device(("opencl", 0)) is on_device


def test_to_device_on_a_queue_of_another_device_is_refused(ctx, queue):
    with pytest.raises(hurray.DescriptorError, match="the stream is on opencl device 0, not 3"):
        hurray.from_numpy(np.ones(3, np.float32)).to_device("opencl:3", stream=queue.int_ptr)


BOGUS_QUEUES = """
import numpy as np, pyopencl as cl, hurray
ctx = cl.Context(devices=[cl.get_platforms()[0].get_devices()[0]])
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
junk = np.zeros(64, np.uint64)
t = hurray.from_numpy(np.arange(4, dtype=np.float32))
bogus = {"one": 1, "unmapped": 4096, "misaligned": junk.ctypes.data + 3,
         "host memory": junk.ctypes.data, "a cl_mem": buf.int_ptr, "a cl_context": ctx.int_ptr}
for what, stream in bogus.items():
    for call in (lambda: t.to_device("opencl", stream=stream),
                 lambda: t.to_device("opencl").to_device("cpu", stream=stream)):
        try:
            call()
            print(what, "accepted")
        except hurray.InvalidArgumentError as error:
            print(what, "|", error)
"""


def test_a_bogus_queue_is_refused_naming_the_stream_not_a_crash(ctx):
    # Regression: to_device(..., stream=1) segfaulted inside the ICD loader, which dereferences
    # the handle for its dispatch table before PoCL's clGetCommandQueueInfo could refuse it.
    lines = run_isolated(BOGUS_QUEUES).splitlines()
    assert len(lines) == 12
    for line in lines:
        what, _, message = line.partition(" | ")
        assert "the stream, a cl_command_queue, 0x" in message and "is not one" in message, line
        if what in ("one", "misaligned"):
            assert "aligned to a pointer" in message
        elif what == "unmapped":
            assert "no memory of this process is there" in message
        elif what == "host memory":
            assert "no platform's ICD dispatch table" in message
        else:  # an object of the platform, of another kind: PoCL reads it as a queue
            assert "another kind of OpenCL object" in message


def test_to_device_without_a_backend_or_runtime_is_unsupported():
    tensor = hurray.from_numpy(np.ones(3, np.float32))
    with pytest.raises(hurray.UnsupportedError, match="no runtime backend for rocm memory"):
        tensor.to_device("rocm")
    if not os.path.exists("/dev/nvidiactl"):
        with pytest.raises(hurray.UnsupportedError, match="libcuda.so.1"):
            tensor.to_device("cuda")


def test_c_producer_python_consumer(ctx, peer_ext, gc_collect):
    """The native peer, a second extension with its own copy of hurray-core, allocates real
    OpenCL memory through its own backend and fills it; Python consumes the capsule."""
    before = peer_ext.released()
    producer = peer_ext.make("dense", device_tag=8, device_memory=True)
    tensor = hurray.from_hurray(producer)
    assert tensor.device == hurray.Device("opencl", 0)
    assert tensor.buffers[0]["alignment"] >= 64
    np.testing.assert_array_equal(host(tensor.to_device("cpu")),
                                  np.array([[1, 2, 3], [4, 5, 6]], np.float32))
    # every buffer of a multi-buffer layout too, byte for byte what the CPU producer makes
    quantised = hurray.from_hurray(peer_ext.make("per_channel", device_tag=8, device_memory=True))
    reference = hurray.from_hurray(peer_ext.make("per_channel"))
    staged = quantised.to_device("cpu")
    for got, want in zip(staged.parts, reference.parts):
        assert got.tobytes() == want.tobytes()
    del tensor, quantised, reference, staged, got, want
    gc_collect()
    after = peer_ext.released()
    made = after["buffers_made"] - before["buffers_made"]
    assert made == 1 + 3 + 3
    assert after["buffers_released"] - before["buffers_released"] == made


def test_crosses_a_second_extension_zero_copy(ctx, queue, peer_ext):
    values = np.arange(8, dtype=np.uint32)
    buf = cl_buffer(ctx, values)
    marker = cl.enqueue_marker(queue)
    tensor = wrap(buf, values, sync_mode="event", sync_handle=marker.int_ptr, owner=(buf, marker))
    received = peer_ext.consume(NoSync(tensor))
    (described,) = received.summary["buffers"]
    assert described["device_tag"] == 8
    assert described["address"] == buf.int_ptr
    assert described["sync_mode"] == 2 and described["sync_handle"] == marker.int_ptr
    received.release()


def test_save_and_load_an_opencl_tensor(ctx, queue, tmp_path):
    values = np.linspace(-1, 1, 30, dtype=np.float32).reshape(5, 6)
    buf = cl_buffer(ctx, values)
    marker = cl.enqueue_marker(queue)
    tensor = wrap(buf, values, sync_mode="event", sync_handle=marker.int_ptr, owner=(buf, marker))
    path = tmp_path / "device.hurray"
    hurray.save(path, {"weights": tensor, "bias": np.ones(3, np.float32)})
    loaded = hurray.load(path)
    assert loaded["weights"].device == hurray.Device("cpu", 0)  # a file holds host bytes
    np.testing.assert_array_equal(host(loaded["weights"]), values)
    # and back onto the device, read there by pyopencl
    returned = loaded["weights"].to_device("opencl", stream=queue.int_ptr)
    np.testing.assert_array_equal(read_back(queue, returned, values), values)


def test_dlpack_carries_kdlopencl(ctx, queue):
    values = np.arange(6, dtype=np.int32)
    buf = cl_buffer(ctx, values)
    tensor = wrap(buf, values)
    assert tensor.__dlpack_device__() == (4, 0)  # kDLOpenCL
    imported = hurray.from_dlpack(tensor)
    assert imported.device == hurray.Device("opencl", 0)
    assert imported.buffer_address == buf.int_ptr  # data is the cl_mem, as DLPack says
    np.testing.assert_array_equal(read_back(queue, imported, values), values)
    # NumPy cannot take device memory: it refuses the capsule
    with pytest.raises(RuntimeError, match="Unsupported device"):
        np.from_dlpack(tensor)


def test_pytorch_refusing_kdlopencl_leaves_the_tensor_whole(ctx):
    # PyTorch calls the deleter as its import fails but keeps the capsule's name: the export
    # must be released once, not again by the capsule (this crashed before).
    torch = peer("torch")
    values = np.arange(6, dtype=np.int32)
    tensor = hurray.from_numpy(values).to_device("opencl")
    for _ in range(3):
        with pytest.raises(RuntimeError):
            torch.from_dlpack(tensor)
    gc.collect()
    np.testing.assert_array_equal(host(tensor.to_device("cpu")), values)


SLOW_FILL = """
__kernel void slow_fill(__global uint *out, __global uint *scratch, uint value, uint spin) {
    size_t i = get_global_id(0);
    uint x = (uint)i;
    for (uint k = 0; k < spin; k++) x = x * 1664525u + 1013904223u;
    scratch[i] = x;   /* keeps the loop */
    out[i] = value;
}
"""


def test_the_consumer_waits_on_the_producers_event(ctx, queue):
    """The producer enqueues a slow kernel that writes the buffer and hands the tensor over
    at once, with the kernel's event; every round the consumer must read the new values."""
    program = cl.Program(ctx, SLOW_FILL).build()
    kernel = cl.Kernel(program, "slow_fill")
    n = 4096
    old = np.zeros(n, np.uint32)
    buf = cl_buffer(ctx, old)
    scratch = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n * 4)
    for round_ in range(1, 16):
        cl.enqueue_copy(queue, buf, old, is_blocking=True)  # the old values again
        kernel.set_args(buf, scratch, np.uint32(round_), np.uint32(20000))
        written = cl.enqueue_nd_range_kernel(queue, kernel, (n,), None)
        queue.flush()
        tensor = hurray.Tensor.from_address(buf.int_ptr, "uint32", n, device="opencl",
                                            sync_mode="event", sync_handle=written.int_ptr,
                                            owner=(buf, written))
        received = hurray.from_hurray(NoSync(tensor))
        assert received.sync_mode == "event"
        got = host(received.to_device("cpu"))  # a queue of its own: only the event orders it
        assert (got == round_).all(), f"round {round_}: read {np.unique(got)}"
    queue.finish()


@pytest.mark.parametrize("protocol", ["__hurray__", "__dlpack__"])
def test_without_a_stream_the_producer_waits_for_the_event(ctx, queue, protocol):
    """stream=None, as from_hurray and from_dlpack pass it, asks for data that is ready: the
    producer waits for the kernel's event through the OpenCL runtime and hands the data over
    as 'ready' (ADR-054), in both protocols alike."""
    program = cl.Program(ctx, SLOW_FILL).build()
    kernel = cl.Kernel(program, "slow_fill")
    n = 4096
    buf = cl_buffer(ctx, np.zeros(n, np.uint32))
    scratch = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n * 4)
    kernel.set_args(buf, scratch, np.uint32(7), np.uint32(200000))
    written = cl.enqueue_nd_range_kernel(queue, kernel, (n,), None)
    queue.flush()
    tensor = hurray.Tensor.from_address(buf.int_ptr, "uint32", n, device="opencl",
                                        sync_mode="event", sync_handle=written.int_ptr,
                                        owner=(buf, written))
    if protocol == "__hurray__":
        received = hurray.from_hurray(tensor)
        assert received.sync_mode == "ready" and received.buffers[0]["sync_handle"] == 0
    else:
        received = hurray.from_dlpack(tensor)
        assert received.device.name == "opencl" and received.sync_mode == "ready"
    assert written.command_execution_status == cl.command_execution_status.COMPLETE
    assert tensor.sync_mode == "event"  # the producer's own tensor is left as it was
    assert (host(received.to_device("cpu")) == 7).all()
    queue.finish()


def test_every_cl_mem_is_released_exactly_once_over_10000_exchanges(ctx, peer_ext, gc_collect):
    """Counted by the producer's release callbacks (each one clReleaseMemObject): the C
    producer allocates a cl_mem per capsule; Python takes it and drops it, 10,000 times."""
    producer = peer_ext.make("dense", device_tag=8, device_memory=True)
    before = peer_ext.released()
    for i in range(10_000):
        tensor = hurray.from_hurray(producer)
        if i % 1000 == 0:
            np.testing.assert_array_equal(host(tensor.to_device("cpu")).ravel(),
                                          np.arange(1, 7, dtype=np.float32))
        del tensor
    gc_collect()
    after = peer_ext.released()
    assert after["buffers_made"] - before["buffers_made"] == 10_000
    assert after["buffers_released"] - before["buffers_released"] == 10_000


def test_borrowed_handles_are_never_retained_or_released(ctx, queue, peer_ext, gc_collect):
    """Hurray borrows the producer's cl_mem and event (buffer-protocol.md 4, rule 3): 10,000
    exchanges through __hurray__, a second extension and DLPack leave both reference counts
    exactly where the producer set them."""
    values = np.arange(16, dtype=np.float32)
    buf = cl_buffer(ctx, values)
    marker = cl.enqueue_marker(queue)
    queue.finish()
    mem_refs = settled(buf, cl.mem_info.REFERENCE_COUNT)
    event_refs = settled(marker, cl.event_info.REFERENCE_COUNT)
    assert (mem_refs, event_refs) == (1, 1)  # pyopencl's own
    tensor = wrap(buf, values, sync_mode="event", sync_handle=marker.int_ptr, owner=(buf, marker))
    for _ in range(10_000):
        hurray.from_hurray(NoSync(tensor))
        peer_ext.consume(NoSync(tensor)).release()
    for _ in range(100):
        hurray.from_dlpack(hurray.from_numpy(values).to_device("opencl"))
    del tensor
    gc_collect()
    assert settled(buf, cl.mem_info.REFERENCE_COUNT) == mem_refs
    assert settled(marker, cl.event_info.REFERENCE_COUNT) == event_refs
    np.testing.assert_array_equal(read_back(queue, hurray.from_hurray(wrap(buf, values)), values),
                                  values)


@pytest.mark.skipif(shutil.which("clinfo") is None, reason="clinfo is not installed")
def test_device_ids_follow_the_platform_order(ctx):
    """device_id counts devices across platforms in clGetPlatformIDs order (2.6.9): PoCL's
    first device is 0 when it is the first platform."""
    platform_index = cl.get_platforms().index(ctx.devices[0].platform)
    if platform_index != 0:
        pytest.skip("the first OpenCL platform is not the one under test")
    tensor = hurray.from_numpy(np.ones(2, np.float32)).to_device("opencl:0")
    assert tensor.buffers[0]["device"].index == 0


# --------------------------------------------------------------------------------------------
# The wire: a server serves OpenCL tensors, a client receives into OpenCL memory (ADR-062)
# --------------------------------------------------------------------------------------------

def test_served_from_opencl_received_into_opencl(ctx, queue):
    values = (np.arange(3 * (1 << 18), dtype=np.float32) * 0.25).reshape(-1, 256)  # 3 MiB
    buf = cl_buffer(ctx, values)
    with hurray.serve({"w": wrap(buf, values)}) as server, \
            hurray.connect(server.address) as client:
        assert hurray.Device("opencl", 0) in client.info["devices"]
        got = client.get("w", device="opencl", stream=queue.int_ptr)
        assert got.device == hurray.Device("opencl", 0)
        assert got.sync_mode == "ready"
        assert got.buffer_address != buf.int_ptr  # new device memory of the client's own
        np.testing.assert_array_equal(read_back(queue, got, values), values)
        # on a queue the client makes in the default context, and rows only
        rows = client.get("w", device="opencl:0", slice=slice(100, 2000))
        assert rows.device == hurray.Device("opencl", 0)
        np.testing.assert_array_equal(host(rows.to_device("cpu")), values[100:2000])
        # to a CPU client: staged through the server's host memory
        on_cpu = client.get("w")
        assert on_cpu.device == hurray.Device("cpu", 0)
        np.testing.assert_array_equal(host(on_cpu), values)


def test_a_cpu_tensor_is_not_served_on_opencl(ctx, queue):
    values = np.arange(10, dtype=np.int64)
    with hurray.serve({"c": values}) as server, hurray.connect(server.address) as client:
        with pytest.raises(hurray.UnsupportedError,
                           match=r"device opencl \(0x08\) is not served here; this server "
                                 r"serves cpu \(0x00\)"):
            client.get("c", device="opencl", stream=queue.int_ptr)
        fell_back = client.get("c", device="opencl", stream=queue.int_ptr, fallback=True)
        assert fell_back.device == hurray.Device("cpu", 0)
        np.testing.assert_array_equal(host(fell_back), values)
        with pytest.raises(hurray.DescriptorError, match="the stream is on opencl device 0, not 2"):
            client.get("c", device="opencl:2", stream=queue.int_ptr)


def test_the_server_waits_on_the_producers_event(ctx, queue):
    """A tensor served with the event of the kernel that writes it: the server's device reads
    wait on the event, so the client receives the written values, never the old ones."""
    program = cl.Program(ctx, SLOW_FILL).build()
    kernel = cl.Kernel(program, "slow_fill")
    n = 4096
    buf = cl_buffer(ctx, np.zeros(n, np.uint32))
    scratch = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n * 4)
    kernel.set_args(buf, scratch, np.uint32(5), np.uint32(200000))
    written = cl.enqueue_nd_range_kernel(queue, kernel, (n,), None)
    queue.flush()
    tensor = hurray.Tensor.from_address(buf.int_ptr, "uint32", n, device="opencl",
                                        sync_mode="event", sync_handle=written.int_ptr,
                                        owner=(buf, written))
    with hurray.serve({"e": tensor}) as server, hurray.connect(server.address) as client:
        got = client.get("e", device="opencl", stream=queue.int_ptr)
        assert (read_back(queue, got, np.zeros(n, np.uint32)) == 5).all()
        assert (host(client.get("e")) == 5).all()
    queue.finish()
