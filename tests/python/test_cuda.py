"""CUDA memory (tag 0x01) through hurray-core's CUDA backend (ADR-047) with PyTorch CUDA tensors
as the peer: DLPack and from_hurray both ways, to_device both ways, the stream and event
semantics of a producer whose writes are still running, and the wire from and into CUDA memory
(ADR-062). It needs an NVIDIA GPU, its driver
(libcuda.so.1) and a CUDA build of PyTorch; elsewhere every test is skipped, except under
HURRAY_REQUIRE_CUDA=1 (scripts/gpu_check.sh), where a missing GPU fails."""

import os

import numpy as np
import pytest

import hurray

REQUIRE_CUDA = os.environ.get("HURRAY_REQUIRE_CUDA") == "1"


def _unavailable():
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    try:
        hurray.from_numpy(np.zeros(1, np.uint8)).to_device("cuda")
    except hurray.UnsupportedError as error:
        return f"hurray's CUDA backend is unavailable: {error}"
    return None


_REASON = _unavailable()
if _REASON is not None:
    if REQUIRE_CUDA:
        raise RuntimeError(f"CUDA is required here: {_REASON}")
    pytest.skip(_REASON, allow_module_level=True)

import torch  # noqa: E402  (only where CUDA is present)


def host(tensor):
    return np.asarray(tensor.__array__())


def test_torch_to_hurray_through_dlpack_zero_copy_and_back_to_host():
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4) * 0.5
    t = hurray.from_dlpack(x)
    assert t.device == hurray.Device("cuda", x.device.index or 0)
    assert t.buffer_address == x.data_ptr()
    np.testing.assert_array_equal(host(t.to_device("cpu")), x.cpu().numpy())
    again = hurray.from_hurray(t)  # the native protocol, zero-copy
    assert again.buffer_address == x.data_ptr()
    np.testing.assert_array_equal(host(again.to_device("cpu")), x.cpu().numpy())


def test_hurray_to_torch_through_dlpack_and_to_device():
    values = np.arange(-8, 8, dtype=np.int32).reshape(4, 4)
    stream = torch.cuda.Stream()  # a created one: the default stream's handle is 0, no queue
    t = hurray.from_numpy(values).to_device("cuda", stream=stream.cuda_stream)
    assert t.device == hurray.Device("cuda", 0)
    assert t.buffers[0]["alignment"] == 256
    assert t.byte_offset == 0  # the copy starts at the first element (ADR-066)
    y = torch.from_dlpack(t)
    assert y.is_cuda and y.data_ptr() == t.buffer_address
    np.testing.assert_array_equal(y.cpu().numpy(), values)
    y.add_(1)  # torch writes, hurray reads the same memory back
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(t.to_device("cpu")), values + 1)
    # the default (primary) context when no stream is given: PyTorch's own
    u = hurray.from_numpy(values * 2).to_device("cuda:0")
    np.testing.assert_array_equal(torch.from_dlpack(u).cpu().numpy(), values * 2)


def _slow_fill(x, value, stream):
    """Fills x with value on `stream` behind a long sleep, so the write is still running when
    the caller goes on."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)
        x.fill_(value)


CONSUMERS = {
    # the producer waits on the host and hands the data over as ready (ADR-054)
    "from_hurray": lambda t, other: hurray.from_hurray(t).to_device("cpu"),
    # a queue of the memory's context: the producer's stream itself, or a stream of hurray's
    # own that waits for the event (cuStreamWaitEvent)
    "memory": lambda t, other: t.to_device("cpu"),
    # the consumer's stream, which waits for the producer's event, or for an event recorded on
    # the producer's stream
    "stream": lambda t, other: t.to_device("cpu", stream=other.cuda_stream),
}


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("mode", ["stream", "event"])
def test_the_consumer_waits_on_the_producers_stream_or_event(mode, consumer):
    x = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    producer, other = torch.cuda.Stream(), torch.cuda.Stream()
    for round_ in range(1, 9):
        x.zero_()
        torch.cuda.synchronize()
        _slow_fill(x, round_, producer)
        if mode == "stream":
            handle = producer.cuda_stream
        else:
            event = torch.cuda.Event()
            event.record(producer)
            handle = event.cuda_event
        t = hurray.Tensor.from_address(x.data_ptr(), "int32", x.shape[0], device="cuda",
                                       sync_mode=mode, sync_handle=handle,
                                       byte_size=x.numel() * 4,
                                       owner=(x, handle if mode == "stream" else event))
        got = host(CONSUMERS[consumer](t, other))
        assert (got == round_).all(), f"round {round_}: read {np.unique(got)}"
    torch.cuda.synchronize()


def test_torch_consumes_on_its_stream_through_from_dlpack():
    values = np.linspace(0, 1, 64, dtype=np.float32)
    t = hurray.from_numpy(values).to_device("cuda")
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        y = torch.from_dlpack(t)  # passes its stream: the READY tensor is safe on it
    np.testing.assert_array_equal(y.cpu().numpy(), values)


def test_a_saved_cuda_tensor_is_staged_through_the_host(tmp_path):
    x = torch.randn(16, 8, device="cuda")
    hurray.save(tmp_path / "cuda.hurray", {"x": hurray.from_dlpack(x)})
    loaded = hurray.load(tmp_path / "cuda.hurray")["x"]
    assert loaded.device == hurray.Device("cpu", 0)
    np.testing.assert_array_equal(host(loaded), x.cpu().numpy())


def test_served_from_cuda_received_into_cuda():
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda") * 0.5  # 4 MiB
    torch.cuda.synchronize()
    consumer = torch.cuda.Stream()
    with hurray.serve({"x": hurray.from_dlpack(x)}) as server, \
            hurray.connect(server.address) as client:
        got = client.get("x", device="cuda", stream=consumer.cuda_stream)
        assert got.device == hurray.Device("cuda", 0) and got.sync_mode == "ready"
        with torch.cuda.stream(consumer):
            y = torch.from_dlpack(got)
        assert y.is_cuda and y.data_ptr() == got.buffer_address != x.data_ptr()
        assert torch.equal(y, x)
        np.testing.assert_array_equal(host(client.get("x")), x.cpu().numpy())  # to the CPU
