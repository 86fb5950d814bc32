"""Host <-> device copies of OpenCL memory: hurray's Tensor.to_device against pyopencl's own
enqueue_copy of the same bytes, on the same device and queue, in the same run (a benchmark, not
a test). The two sides are timed in interleaved rounds (bench/timing.py), so that both meet the
same load; figures are the minimum and the median of --rounds, and each ratio is hurray's time /
pyopencl's (target: 1.0x): of the wall time, and of the minimum CPU time of the process (every
thread, PoCL's included), which is the steadier of the two on a machine shared with other work.

    .venv/bin/python bench/bench_opencl.py [--rounds 20] [--sizes 4096,1048576,16777216,67108864]
                                           [--quick]

  to device    hurray.from_numpy(a).to_device('opencl', stream=q)   (allocates + writes)
               vs cl.Buffer(ctx, size) + cl.enqueue_copy(q, buf, a)  (allocates + writes)
  to host      t.to_device('cpu', stream=q)                          (allocates + reads)
               vs np.empty + cl.enqueue_copy(q, out, buf)            (allocates + reads)
  to host*     the same with no stream: hurray makes a queue in the memory's own context

Like with like: both sides allocate the destination on every call (to_device returns a new
tensor; pyopencl is given a new cl.Buffer / np.empty each time), copy once with no staging copy
(hurray writes the device straight from the NumPy array's memory, the array's bytes and no
more (ADR-066), and reads them straight into the new host buffer), and block until the bytes have arrived (clEnqueue{Write,Read}Buffer with
CL_TRUE, as enqueue_copy(is_blocking=True)). "to host*" is not like with like: hurray makes a
queue per call. The device is the first of the first platform (PoCL on the CPU in CI, where
"device memory" is host memory and the copy is a memcpy).
"""

import argparse

import numpy as np
import pyopencl as cl

import hurray
from timing import Table, interleaved, load_average


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--sizes", default="4096,1048576,16777216,67108864")
    parser.add_argument("--quick", action="store_true",
                        help="5 rounds, 4 KiB and 1 MiB: to check the bench itself")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.sizes = 5, "4096,1048576"
    device = cl.get_platforms()[0].get_devices()[0]
    ctx = cl.Context(devices=[device])
    queue = cl.CommandQueue(ctx)
    print(f"device: {device.name} ({device.platform.name}); min and median of {args.rounds} "
          "interleaved rounds")
    load_average("start")
    for size in (int(s) for s in args.sizes.split(",")):
        host = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
        source = hurray.from_numpy(host)
        on_device = source.to_device("opencl", stream=queue.int_ptr)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size)
        cl.enqueue_copy(queue, buf, host, is_blocking=True)

        def pyopencl_to_device():
            b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size)
            cl.enqueue_copy(queue, b, host, is_blocking=True)

        def pyopencl_to_host():
            out = np.empty(size, np.uint8)
            cl.enqueue_copy(queue, out, buf, is_blocking=True)

        rows = [
            ("to device", lambda: source.to_device("opencl", stream=queue.int_ptr),
             pyopencl_to_device),
            ("to host", lambda: on_device.to_device("cpu", stream=queue.int_ptr),
             pyopencl_to_host),
            ("to host*", lambda: on_device.to_device("cpu"), pyopencl_to_host),
        ]
        back = np.asarray(on_device.to_device("cpu").__array__())
        assert np.array_equal(back, host), "the round trip changed the bytes"
        for name, ours, theirs in rows:
            table = Table(f"{size} bytes, {name}", refs=["pyopencl"], unit="us", cpu=True)
            table.add_all(interleaved({"hurray": ours, "pyopencl": theirs}, args.rounds))
            table.print()
    load_average("end")


if __name__ == "__main__":
    main()
