"""The wire protocol on loopback: hurray.serve / hurray.connect against references and peers
measured in the same run (a benchmark, not a test; docs/impl/wire.md).

    .venv/bin/python bench/bench_wire.py [--mib 512] [--rounds 5] [--small 2000] [--quick]

Every contender of a table is timed in interleaved rounds with the others (bench/timing.py: the
order rotates each round, so the load of a shared machine falls on all of them alike), and each
is given as the minimum and the median of --rounds (at least 5), and as ratios to the table's
references:
  raw TCP    the ceiling for one stream, no protocol, no checks: a child process (its own
             interpreter, so no lock is shared with the receiver) sends the same bytes with one
             socket.sendall; the receiver makes a new NumPy array each round (new memory,
             faulted in as the bytes land: glibc maps blocks this large afresh) and fills it
             with recv_into(..., MSG_WAITALL), one call for the whole tensor. Neither end sets
             socket buffer sizes; neither does hurray. A fetch allocates its tensor with
             hurray_buffer_alloc, which takes the memory the previous round's tensor released
             (ADR-108), as Flight's memory pool reuses its own; "nothing kept" is the same
             fetch after hurray.empty_cache(), as a process's first fetch is.
  into memory allocated once
             the transport alone: hurray's Client.read(name, 0, nbytes, out=) (every DATA
             frame's XXH3 check compared as it lands) against the raw socket's recv_into, each
             into its own array allocated and faulted in once before the rounds. A VM that gives
             freed memory back to its host (free page reporting) makes the rows above that
             allocate fresh memory pay for faulting it in again after a pause; these rows do
             not allocate.
  Flight     pyarrow.flight: the same bytes as one uint8 column, do_get + read_all from an
             in-process FlightServerBase on 127.0.0.1, at its best and at its worst: a table of
             4 MiB record batches (Flight's streaming unit, the size its own guidance and
             gRPC's message limits favour) and one giant record batch. Targets are against the
             4 MiB batches.
  unix fd    the same-host fast path (spec §6.6): over a Unix-domain socket the server hands
             over the tensor's memory as a descriptor (a sealed memfd for an in-memory tensor,
             the file's own for a served file) and the client maps it, checking its XXH3-64.
             Timed to a usable tensor whose every byte was read once (a sum), against memcpy
             of the bytes into new memory (np.empty + np.copyto, what any copying same-host
             path pays) and the same sum. The memfd's one-time copy, made at the first
             request, is one call, beside a copy into new memory of the memfd's page size
             (NumPy's huge-page advice switched off where shmem gets no huge pages).
  unix bytes the same fetch through the Unix socket without fd passing (DATA frames).
  unix small round trips of a 1 KiB tensor over a Unix socket with fd passing on (a tensor
             under 512 KiB goes as DATA frames even so) against the same without it.
  small      round trips of a 64-byte tensor: hurray get, against Flight do_get of a 64-byte
             table.
  TLS        the same fetch over hurrays:// (TLS 1.3), against the plaintext fetch and against
             Flight over grpc+tls (both batchings), with certificates of a throwaway CA made by
             tests/tls/make_certs.sh; and hurrays read(out=) into memory allocated once, the
             TLS transport alone.
Every table of small round trips is given twice: with the threads where the scheduler puts
them, and with every thread of the process (hurray's servers, Flight's gRPC pool) on one CPU,
where waking the other side costs every contender alike (bench/timing.py says why).
hurray's fetch includes what the protocol does: the request, the descriptor, checking the
XXH3-64 of every byte, and allocating the destination (64-byte aligned) once. The memfd and
memcpy rows also give the minimum CPU time of the process (every thread: the server's too), the
steadier figure where other work competes for the CPUs. The default 512 MiB keeps what the run
holds at once (the tensor, the raw sender's copy, a fetched copy) under 2 GiB.
"""

import argparse
import contextlib
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

from timing import Table, interleaved, load_average, nothing_kept, one_cpu


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

    def fetch(self, into=None):
        """Into new memory each time, as a fetch makes, or into the array `into`."""
        self.out = np.empty(self.nbytes, np.uint8) if into is None else into
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


def flight_client(tables, certs=None):
    """A new in-process Flight server of `tables` (over grpc+tls with the certificates in the
    directory `certs`) and a client of it: (server, client)."""
    server = Tables(tables, certs)
    threading.Thread(target=server.serve, daemon=True).start()
    if certs is None:
        client = flight.connect(f"grpc://127.0.0.1:{server.port}")
    else:
        with open(f"{certs}/ca.pem", "rb") as f:
            client = flight.connect(f"grpc+tls://localhost:{server.port}", tls_root_certs=f.read())
    return server, client


def round_trips(title, contenders, refs, rounds, number, notes=()):
    """Two tables of the same small round trips, in microseconds: with the threads where the
    scheduler puts them, and with every thread of the process on one CPU (timing.one_cpu),
    where waking the other side costs every contender alike."""
    placed = Table(title, unit="us", refs=refs, notes=notes)
    placed.add_all(interleaved(contenders, rounds, number))
    with one_cpu() as cpu:
        pinned = Table(f"{title}, every thread on CPU {cpu}", unit="us", refs=refs, notes=notes)
        pinned.add_all(interleaved(contenders, rounds, number))
    return placed, pinned


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", type=int, default=2000, help="small requests per round")
    parser.add_argument("--quick", action="store_true",
                        help="64 MiB, 5 rounds of 200 small requests: to check the bench itself")
    parser.add_argument("--raw-sender", type=int, help=argparse.SUPPRESS)  # RawTcp's child
    args = parser.parse_args()
    if args.raw_sender is not None:
        return raw_sender(args.raw_sender)
    if args.quick:
        args.mib, args.rounds, args.small = min(args.mib, 64), 5, min(args.small, 200)
    nbytes = args.mib << 20
    data = pattern(nbytes)
    tiny = np.arange(16, dtype=np.float32)
    print(f"{args.mib} MiB tensor, min and median of {args.rounds} interleaved rounds, "
          "loopback only")
    load_average("start")
    column = pa.table({"x": pa.array(data, type=pa.uint8())})
    tables = {"x": column.combine_chunks(),  # one record batch: Flight's worst case
              "x4": pa.Table.from_batches(column.to_batches(max_chunksize=4 << 20)),
              "tiny": pa.table({"x": pa.array(tiny)})}
    one, batched, small = flight.Ticket(b"x"), flight.Ticket(b"x4"), flight.Ticket(b"tiny")
    assert len(tables["x"].to_batches()) == 1
    want = touch(data)
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        # ---- TCP: hurray against raw sockets and Flight ---------------------------------
        raw = RawTcp(nbytes)
        stack.callback(raw.close)
        server = stack.enter_context(hurray.serve({"x": data, "tiny": tiny}))
        c = stack.enter_context(hurray.connect(server.address))
        assert np.array_equal(np.asarray(c.get("x")), data)
        fserver, fclient = flight_client(tables)
        stack.callback(fserver.shutdown)
        stack.callback(fclient.close)
        assert touch(np.asarray(fclient.do_get(batched).read_all()["x"].combine_chunks())) == want
        fetch = {"hurray fetch": lambda: c.get("x"),
                 "hurray fetch, nothing kept": lambda: c.get("x"), "raw socket": raw.fetch,
                 "Flight, 4 MiB batches": lambda: fclient.do_get(batched).read_all(),
                 "Flight, one batch": lambda: fclient.do_get(one).read_all()}
        tcp = Table(f"TCP: fetch {args.mib} MiB", refs=["raw socket", "Flight, 4 MiB batches"],
                    nbytes=nbytes, notes=["targets: hurray / raw >= 0.9x throughput, "
                                          "hurray faster than Flight at its best",
                                          "hurray fetch reuses the memory the previous "
                                          "round's tensor released (ADR-108), as Flight's "
                                          "pool does; nothing kept: after hurray.empty_cache()"])
        tcp.add_all(interleaved(fetch, args.rounds, before=nothing_kept))
        assert np.array_equal(raw.out, data)
        raw.out = None
        mine, theirs = np.ones(nbytes, np.uint8), np.ones(nbytes, np.uint8)  # faulted in once
        into = Table(f"TCP: {args.mib} MiB into memory allocated once (the transport alone)",
                     refs=["raw socket recv_into"], nbytes=nbytes,
                     notes=["target: hurray / raw >= 0.9x throughput"])
        into.add_all(interleaved({
            "hurray read(out=)": lambda: c.read("x", 0, nbytes, out=mine),
            "raw socket recv_into": lambda: raw.fetch(into=theirs)}, args.rounds))
        assert np.array_equal(mine, data) and np.array_equal(theirs, data)
        raw.out = mine = theirs = None
        small_tables = round_trips("small: one round trip of a 64-byte tensor", {
            "hurray get": lambda: c.get("tiny"),
            "Flight do_get": lambda: fclient.do_get(small).read_all()},
            ["Flight do_get"], args.rounds, args.small)

        # ---- Unix socket: the fd-passing path against memcpy ----------------------------
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

        path = f"{tmp}/bench.hurray"
        hurray.save(path, {"f": data})
        kib = np.arange(256, dtype=np.float32)  # 1 KiB: below the descriptor threshold
        server = stack.enter_context(hurray.serve({"x": data, "kib": kib},
                                                  address=f"unix:{tmp}/a.sock"))
        memfd = stack.enter_context(hurray.connect(server.address))
        assert memfd.info["fd_passing"]
        t0 = time.perf_counter()
        assert touch(np.asarray(memfd.get("x"))) == want  # the first: the memfd is made
        t_first = time.perf_counter() - t0
        server = stack.enter_context(hurray.serve(path, address=f"unix:{tmp}/b.sock"))
        filefd = stack.enter_context(hurray.connect(server.address))
        server = stack.enter_context(hurray.serve({"x": data, "kib": kib},
                                                  address=f"unix:{tmp}/c.sock"))
        nofd = stack.enter_context(hurray.connect(server.address, fd_passing=False))
        unix = Table(f"Unix socket: fetch {args.mib} MiB and read every byte", unit="ms",
                     refs=["memcpy + touch"], nbytes=nbytes, cpu=True,
                     notes=[f"the first request, making the memfd, one call: "
                            f"{t_first * 1e3:.1f} ms; shmem huge pages: {shmem_huge_pages()}",
                            "target: fd faster than memcpy"])
        unix.add_all(interleaved({
            "fd (memfd) + touch": lambda: touch(np.asarray(memfd.get("x"))),
            "fd (file) + touch": lambda: touch(np.asarray(filefd.get("f"))),
            "memcpy + touch": memcpy_touch,
            "bytes (fd_passing=False) + touch": lambda: touch(np.asarray(nofd.get("x"))),
            "copy without huge pages, no touch": copy_without_huge_pages}, args.rounds))
        unix_small = round_trips("Unix socket small: one round trip of a 1 KiB tensor", {
            "get, fd passing on": lambda: memfd.get("kib"),
            "get, fd_passing=False": lambda: nofd.get("kib")},
            ["get, fd_passing=False"], args.rounds, args.small,
            notes=["target: fd passing costs a small get nothing"])

        # ---- TLS: hurrays:// against plaintext and Flight over grpc+tls ----------------
        certs = f"{tmp}/certs"
        os.mkdir(certs)
        make_certs = os.path.join(os.path.dirname(__file__), os.pardir, "tests", "tls",
                                  "make_certs.sh")
        subprocess.run(["sh", make_certs, certs], check=True, stdout=subprocess.DEVNULL)
        tls = {"certfile": f"{certs}/server.pem", "keyfile": f"{certs}/server.key"}
        server = stack.enter_context(hurray.serve({"x": data, "tiny": tiny}, tls=tls))
        secure = stack.enter_context(hurray.connect(server.address,
                                                    tls={"cafile": f"{certs}/ca.pem"}))
        fserver, ftls = flight_client(tables, certs)
        stack.callback(fserver.shutdown)
        stack.callback(ftls.close)
        tls_table = Table(f"TLS: fetch {args.mib} MiB", nbytes=nbytes,
                          refs=["hurray fetch (plaintext)", "Flight TLS, 4 MiB batches"],
                          notes=["hurrays read(out=): into memory allocated once, the TLS "
                                 "transport alone; nothing kept: after hurray.empty_cache()",
                                 "target: hurrays faster than Flight TLS at its best"])
        mine = np.ones(nbytes, np.uint8)  # faulted in once
        tls_table.add_all(interleaved({
            "hurrays fetch": lambda: secure.get("x"),
            "hurrays fetch, nothing kept": lambda: secure.get("x"),
            "hurrays read(out=)": lambda: secure.read("x", 0, nbytes, out=mine),
            "hurray fetch (plaintext)": lambda: c.get("x"),
            "Flight TLS, 4 MiB batches": lambda: ftls.do_get(batched).read_all(),
            "Flight TLS, one batch": lambda: ftls.do_get(one).read_all()}, args.rounds,
            before=nothing_kept))
        assert np.array_equal(mine, data)
        mine = None
        tls_small = round_trips("TLS small: one round trip of a 64-byte tensor", {
            "hurrays get": lambda: secure.get("tiny"),
            "hurray get (plaintext)": lambda: c.get("tiny")},
            ["hurray get (plaintext)"], args.rounds, args.small)
    for table in (tcp, into, *small_tables, unix, *unix_small, tls_table, *tls_small):
        table.print()
    load_average("end")


if __name__ == "__main__":
    main()
