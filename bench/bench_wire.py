"""The wire protocol on loopback: hurray.serve / hurray.connect against references and peers
measured in the same run (a benchmark, not a test; docs/impl/wire.md).

    .venv/bin/python bench/bench_wire.py [--mib 1024] [--rounds 3] [--small 2000]

Every figure is the best of --rounds, and each is also given as a ratio:
  raw TCP    the ceiling for one stream, no protocol, no checks: a child process (its own
             interpreter, so no lock is shared with the receiver) sends the same bytes with one
             socket.sendall; the receiver makes a new NumPy array each round (as a fetch makes
             the tensor it returns: new memory, faulted in as the bytes land) and fills it with
             recv_into(..., MSG_WAITALL), one call for the whole tensor. Neither end sets socket
             buffer sizes; neither does hurray.
  unix fd    the same-host fast path (spec §6.6): over a Unix-domain socket the server hands
             over the tensor's memory as a descriptor (a sealed memfd for an in-memory tensor,
             the file's own for a served file) and the client maps it, checking its XXH3-64.
             Timed to a usable tensor whose every byte was read once (a sum), against memcpy
             of the bytes into new memory (np.empty + np.copyto, what any copying same-host
             path pays) and the same sum. The memfd's one-time copy, made at the first
             request, is timed apart, against a copy into new memory of the memfd's page size
             (NumPy's huge-page advice switched off where shmem gets no huge pages).
  unix bytes the same fetch through the Unix socket without fd passing (DATA frames).
  Flight     pyarrow.flight: the same bytes as one uint8 column of a Table, do_get + read_all
             from an in-process FlightServerBase on 127.0.0.1.
  small      round trips of a 64-byte tensor: hurray get, against Flight do_get of a 64-byte
             table, requests per second.
  TLS        the same fetch over hurrays:// (TLS 1.3), against the plaintext fetch and against
             Flight over grpc+tls, with certificates of a throwaway CA made by
             tests/tls/make_certs.sh.
hurray's fetch includes what the protocol does: the request, the descriptor, checking the
XXH3-64 of every byte, and allocating the destination (64-byte aligned) once. Rounds of a
measurement and of its reference alternate, so that the load of a shared machine falls on both;
for the memfd against memcpy the CPU time of the process (every thread: the server's too) is
given beside the wall time, the steadier of the two where other work competes for the CPUs.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
from numpy._core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage

import hurray

from timing import best, best_pair_wall_and_cpu


def pattern(nbytes):
    """`nbytes` (a multiple of 8) of the same non-trivial bytes in every process: no shortcut."""
    return (np.arange(nbytes // 8, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.uint8)


def gibps(nbytes, seconds):
    return nbytes / seconds / (1 << 30)


def raw_sender(nbytes):
    """The child of RawTcp: prints its port, then sends the bytes to each connection, until its
    standard input closes (the parent exited)."""
    view = memoryview(pattern(nbytes)).cast("B")
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    while True:
        conn, _ = listener.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(view)


class RawTcp:
    """One plain TCP stream of the same bytes per fetch, from a sender in a child process."""

    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.child = subprocess.Popen([sys.executable, __file__, "--raw-sender", str(nbytes)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.child.stdout.readline())
        self.out = None

    def fetch(self):
        self.out = np.empty(self.nbytes, np.uint8)  # new memory each time, as a fetch makes
        target = memoryview(self.out).cast("B")
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            got = 0
            while got < len(target):
                n = s.recv_into(target[got:], len(target) - got, socket.MSG_WAITALL)
                if n == 0:
                    raise RuntimeError("short read")
                got += n

    def close(self):
        self.child.stdin.close()
        self.child.wait()


def shmem_huge_pages():
    """The kernel's transparent huge page setting for shmem, which a memfd's pages follow."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "unknown"


def touch(array):
    """Reads every byte once (a sum over 8-byte words): what using a tensor costs at least."""
    return int(np.add.reduce(array.view(np.uint64), dtype=np.uint64))


class Tables(flight.FlightServerBase):
    def __init__(self, tables, certs=None):
        if certs is None:
            super().__init__("grpc://127.0.0.1:0")
        else:
            pair = flight.CertKeyPair(open(f"{certs}/server.pem", "rb").read(),
                                      open(f"{certs}/server.key", "rb").read())
            super().__init__("grpc+tls://127.0.0.1:0", tls_certificates=[pair])
        self.tables = tables

    def do_get(self, context, ticket):
        return flight.RecordBatchStream(self.tables[ticket.ticket.decode()])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--raw-sender", type=int, help=argparse.SUPPRESS)  # RawTcp's child
    args = parser.parse_args()
    if args.raw_sender is not None:
        return raw_sender(args.raw_sender)
    nbytes = args.mib << 20
    data = pattern(nbytes)
    tiny = np.arange(16, dtype=np.float32)
    print(f"{args.mib} MiB tensor, best of {args.rounds}, loopback only, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    # ---- TCP: hurray against raw sockets ------------------------------------------------
    raw = RawTcp(nbytes)
    with hurray.serve({"x": data, "tiny": tiny}) as server, hurray.connect(server.address) as c:
        got = np.asarray(c.get("x"))
        assert np.array_equal(got, data)
        del got
        (t_hurray, _), (t_raw, _) = best_pair_wall_and_cpu(lambda: c.get("x"), raw.fetch,
                                                           args.rounds)
        n = args.small
        t0 = time.perf_counter()
        for _ in range(n):
            c.get("tiny")
        t_small = (time.perf_counter() - t0) / n
    assert np.array_equal(raw.out, data)
    raw.close()
    raw.out = None
    print(f"  TCP    hurray fetch  {gibps(nbytes, t_hurray):6.2f} GiB/s")
    print(f"         raw socket    {gibps(nbytes, t_raw):6.2f} GiB/s   "
          f"hurray / raw = {t_raw / t_hurray:.2f}x (target >= 0.9x)")

    # ---- Unix socket: the fd-passing path against memcpy --------------------------------
    def memcpy_touch():
        copy = np.empty_like(data)
        np.copyto(copy, data)
        return touch(copy)

    def copy_without_huge_pages():
        advice = _get_madvise_hugepage()
        _set_madvise_hugepage(False)
        try:
            np.copyto(np.empty_like(data), data)
        finally:
            _set_madvise_hugepage(advice)

    want = touch(data)
    t_small_pages = best(copy_without_huge_pages, 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/bench.hurray"
        hurray.save(path, {"f": data})
        with hurray.serve({"x": data}, address=f"unix:{tmp}/a.sock") as server, \
                hurray.connect(server.address) as c:
            assert c.info["fd_passing"]
            t0 = time.perf_counter()
            assert touch(np.asarray(c.get("x"))) == want  # the first: the memfd is made
            t_first = time.perf_counter() - t0
            (t_fd, c_fd), (t_memcpy, c_memcpy) = best_pair_wall_and_cpu(
                lambda: touch(np.asarray(c.get("x"))), memcpy_touch, args.rounds)
        with hurray.serve(path, address=f"unix:{tmp}/b.sock") as server, \
                hurray.connect(server.address) as c:
            assert touch(np.asarray(c.get("f"))) == want
            t_file = best(lambda: touch(np.asarray(c.get("f"))), args.rounds)
        with hurray.serve({"x": data}, address=f"unix:{tmp}/c.sock") as server, \
                hurray.connect(server.address, fd_passing=False) as c:
            t_unix = best(lambda: c.get("x"), args.rounds)
    print(f"  unix   fd (memfd)    {t_fd * 1e3:7.1f} ms to a used tensor  "
          f"(first request, making the memfd: {t_first * 1e3:.1f} ms;")
    print(f"                       a copy into new memory without huge pages: "
          f"{t_small_pages * 1e3:.1f} ms; shmem huge pages: {shmem_huge_pages()})")
    print(f"         fd (file)     {t_file * 1e3:7.1f} ms")
    print(f"         memcpy        {t_memcpy * 1e3:7.1f} ms   "
          f"memcpy / fd = {t_memcpy / t_fd:.2f}x (memfd), {t_memcpy / t_file:.2f}x (file) "
          f"(target > 1x)")
    print(f"         CPU time      {c_fd * 1e3:7.1f} ms fd (memfd), "
          f"{c_memcpy * 1e3:.1f} ms memcpy   memcpy / fd = {c_memcpy / c_fd:.2f}x")
    print(f"  unix   bytes fetch   {gibps(nbytes, t_unix):6.2f} GiB/s   "
          f"(fd_passing=False: DATA frames)")

    # ---- Arrow Flight as the peer ------------------------------------------------------
    tables = {"x": pa.table({"x": pa.array(data, type=pa.uint8())}),
              "tiny": pa.table({"x": pa.array(tiny)})}
    server = Tables(tables)
    threading.Thread(target=server.serve, daemon=True).start()
    client = flight.connect(f"grpc://127.0.0.1:{server.port}")
    ticket, small_ticket = flight.Ticket(b"x"), flight.Ticket(b"tiny")
    t_flight = best(lambda: client.do_get(ticket).read_all(), args.rounds)
    t0 = time.perf_counter()
    for _ in range(args.small):
        client.do_get(small_ticket).read_all()
    t_flight_small = (time.perf_counter() - t0) / args.small
    client.close()
    server.shutdown()
    print(f"  Flight do_get        {gibps(nbytes, t_flight):6.2f} GiB/s   "
          f"hurray / Flight = {t_flight / t_hurray:.2f}x (target > 1x)")

    print(f"  small  hurray get    {t_small * 1e6:7.1f} us/request  "
          f"{1 / t_small:8.0f} requests/s")
    print(f"         Flight do_get {t_flight_small * 1e6:7.1f} us/request  "
          f"{1 / t_flight_small:8.0f} requests/s   "
          f"hurray / Flight = {t_flight_small / t_small:.2f}x")

    # ---- TLS: hurrays:// against plaintext and Flight over grpc+tls --------------------
    with tempfile.TemporaryDirectory() as certs:
        make_certs = os.path.join(os.path.dirname(__file__), os.pardir, "tests", "tls",
                                  "make_certs.sh")
        subprocess.run(["sh", make_certs, certs], check=True)
        tls = {"certfile": f"{certs}/server.pem", "keyfile": f"{certs}/server.key"}
        with hurray.serve({"x": data, "tiny": tiny}, tls=tls) as server, \
                hurray.connect(server.address, tls={"cafile": f"{certs}/ca.pem"}) as c:
            t_tls = best(lambda: c.get("x"), args.rounds)
            t0 = time.perf_counter()
            for _ in range(args.small):
                c.get("tiny")
            t_tls_small = (time.perf_counter() - t0) / args.small
        server = Tables(tables, certs)
        threading.Thread(target=server.serve, daemon=True).start()
        client = flight.connect(f"grpc+tls://localhost:{server.port}",
                                tls_root_certs=open(f"{certs}/ca.pem", "rb").read())
        t_flight_tls = best(lambda: client.do_get(ticket).read_all(), args.rounds)
        client.close()
        server.shutdown()
    print(f"  TLS    hurrays fetch {gibps(nbytes, t_tls):6.2f} GiB/s   "
          f"hurrays / hurray = {t_hurray / t_tls:.2f}x (the cost of TLS 1.3)")
    print(f"         Flight TLS    {gibps(nbytes, t_flight_tls):6.2f} GiB/s   "
          f"hurrays / Flight TLS = {t_flight_tls / t_tls:.2f}x (target > 1x)")
    print(f"         hurrays get   {t_tls_small * 1e6:7.1f} us/request  "
          f"{1 / t_tls_small:8.0f} requests/s")


if __name__ == "__main__":
    main()
