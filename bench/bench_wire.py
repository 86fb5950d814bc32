"""The wire protocol on loopback: hurray.serve / hurray.connect against references and peers
measured in the same run (a benchmark, not a test; docs/impl/wire.md).

    .venv/bin/python bench/bench_wire.py [--mib 1024] [--rounds 3] [--small 2000]

Every figure is the best of --rounds, and each is also given as a ratio:
  raw TCP    socket.sendall of the same bytes from a server thread, recv_into a new NumPy
             array on the client (allocated each round, as a fetch allocates the tensor it
             returns): the ceiling for one stream, no protocol, no checks.
  unix       the same fetch through a Unix-domain socket, against np.copyto of the bytes
             between two in-memory arrays (memcpy: what any same-host path that copies pays).
  Flight     pyarrow.flight: the same bytes as one uint8 column of a Table, do_get + read_all
             from an in-process FlightServerBase on 127.0.0.1.
  small      round trips of a 64-byte tensor: hurray get, against Flight do_get of a 64-byte
             table, requests per second.
  TLS        the same fetch over hurrays:// (TLS 1.3), against the plaintext fetch and against
             Flight over grpc+tls, with certificates of a throwaway CA made by
             tests/tls/make_certs.sh.
hurray's fetch includes what the protocol does: the request, the descriptor, checking the
XXH3-64 of every byte, and allocating the destination (64-byte aligned) once.
"""

import argparse
import os
import socket
import subprocess
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

import hurray
from timing import best


def gibps(nbytes, seconds):
    return nbytes / seconds / (1 << 30)


def raw_tcp(data, rounds):
    """sendall / recv_into of the same bytes over one loopback TCP connection per round."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    view = memoryview(data).cast("B")

    def serve():
        for _ in range(rounds):
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(view)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    out = None

    def fetch():
        nonlocal out
        out = np.empty(data.nbytes, np.uint8)  # new memory each time, as a fetch makes
        target = memoryview(out).cast("B")
        with socket.create_connection(("127.0.0.1", port)) as s:
            got = 0
            while got < len(target):
                n = s.recv_into(target[got:], len(target) - got)
                if n == 0:
                    raise RuntimeError("short read")
                got += n

    seconds = best(fetch, rounds)
    thread.join()
    listener.close()
    assert np.array_equal(out[:: 1 << 20], data[:: 1 << 20])
    return seconds


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
    args = parser.parse_args()
    nbytes = args.mib << 20
    data = np.arange(nbytes, dtype=np.uint64).astype(np.uint8)  # not zeros: no shortcut
    tiny = np.arange(16, dtype=np.float32)
    print(f"{args.mib} MiB tensor, best of {args.rounds}, loopback only")

    # ---- TCP: hurray against raw sockets ------------------------------------------------
    with hurray.serve({"x": data, "tiny": tiny}) as server, hurray.connect(server.address) as c:
        t_hurray = best(lambda: c.get("x"), args.rounds)
        got = np.asarray(c.get("x"))
        assert np.array_equal(got, data)
        del got
        n = args.small
        t0 = time.perf_counter()
        for _ in range(n):
            c.get("tiny")
        t_small = (time.perf_counter() - t0) / n
    t_raw = raw_tcp(data, args.rounds)
    print(f"  TCP    hurray fetch  {gibps(nbytes, t_hurray):6.2f} GiB/s")
    print(f"         raw socket    {gibps(nbytes, t_raw):6.2f} GiB/s   "
          f"hurray / raw = {t_raw / t_hurray:.2f}x (target >= 0.9x)")

    # ---- Unix socket against memcpy ----------------------------------------------------
    with tempfile.TemporaryDirectory() as tmp:
        address = f"unix:{tmp}/bench.sock"
        with hurray.serve({"x": data}, address=address) as server, \
                hurray.connect(server.address) as c:
            t_unix = best(lambda: c.get("x"), args.rounds)
    copy = np.empty_like(data)
    t_memcpy = best(lambda: np.copyto(copy, data), args.rounds)
    del copy
    print(f"  unix   hurray fetch  {gibps(nbytes, t_unix):6.2f} GiB/s")
    print(f"         memcpy        {gibps(nbytes, t_memcpy):6.2f} GiB/s   "
          f"hurray / memcpy = {t_memcpy / t_unix:.2f}x (a copying path; fd passing is not "
          f"implemented)")

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
