#!/bin/sh
# wire_4gib.sh [BUILD] -- by hand, not in CI (it writes 2 x 4.5 GiB and takes minutes on a small
# machine): a tensor larger than 4 GiB crosses the wire with bounded memory on both sides, from
# a file to a file through the CLI. (tests/c/test_wire_large.c streams 4.5 GiB in every test
# run, from memory to a sink, without the disk.)
# `hurray serve` serves it from the file's mapping; `hurray fetch` streams it into a new file;
# `hurray verify` checks every checksum of the result and NumPy compares the bytes. The
# client's peak resident memory is printed (GNU time): a few MiB whatever the size (measured:
# 4.6 MiB for 4.5 GiB). The server holds no copy either: it sends from the file's mapping.
set -eu
build=${1:-build}
hurray=$(realpath "$build/hurray")
python=$(pwd)/.venv/bin/python
dir=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir"
"$python" - <<'PYTHON'
import numpy as np, hurray
n = (4 << 30) + (512 << 20)                      # 4.5 GiB
with open("zeros.bin", "wb") as f:
    f.truncate(n)                                # sparse: costs no disk until written
a = np.memmap("zeros.bin", dtype=np.uint8, mode="r+", shape=(n,))
a[::4096] = np.arange(len(a[::4096]), dtype=np.uint64).astype(np.uint8)  # not all zeros
a.flush()
hurray.save("big.hurray", {"big": a})
PYTHON
rm zeros.bin
"$hurray" serve -a 127.0.0.1:0 big.hurray >served.txt &
server=$!
while [ ! -s served.txt ]; do sleep 0.1; done
address=$(head -n 1 served.txt)  # the first line: the address alone
/usr/bin/time -f "client peak RSS: %M KiB, %e s" "$hurray" fetch "$address" big -o got.hurray
"$hurray" verify got.hurray
"$python" -c "
import hurray, numpy as np
a, b = hurray.load('big.hurray')['big'], hurray.load('got.hurray')['big']
assert a.shape == b.shape == ((4 << 30) + (512 << 20),)
assert np.array_equal(np.asarray(a), np.asarray(b))
print('4.5 GiB: identical')"
kill -INT $server
wait $server || true
