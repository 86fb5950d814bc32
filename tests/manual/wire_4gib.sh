#!/bin/sh
# wire_4gib.sh [BUILD] -- by hand, not in CI (it writes 2 x 4.5 GiB and takes minutes on a small
# machine): a tensor larger than 4 GiB crosses the wire with bounded memory on both sides.
# `hurray serve` serves it from the file's mapping; `hurray fetch` streams it into a new file;
# `hurray verify` checks every checksum of the result and `cmp` compares the bytes. The peak
# resident memory of the server and the client is printed (GNU time): the client's stays at a
# few MiB whatever the size; the server's counts the mapped pages it sent, which the kernel can
# drop at any time (file-backed), not heap.
set -eu
build=${1:-build}
hurray=$(realpath "$build/hurray")
python=$(realpath .venv/bin/python)
dir=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT
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
/usr/bin/time -f "server peak RSS: %M KiB" "$hurray" serve -a 127.0.0.1:0 big.hurray >served.txt &
server=$!
while [ ! -s served.txt ]; do sleep 0.1; done
address=$(sed -n 's/^serving 1 file on \([0-9.:]*\)$/\1/p' served.txt)
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
