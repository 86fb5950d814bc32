#!/bin/sh
# test_cli.sh HURRAY MAKE_FILES DIR [PYTHON] -- runs the `hurray` command on files written by
# make_files into DIR and checks its output and exit statuses (0 ok, 1 checksum mismatch,
# 2 usage, 3 invalid file, 4 unsupported, 5 system error: the same in every command). With a
# PYTHON that has numpy and safetensors, the files
# `hurray convert` writes are also loaded by those packages, and theirs converted.
set -u
hurray=$1
make_files=$2
dir=$3
python=${4:-}
make_certs=$(cd "$(dirname "$0")/../tls" && pwd)/make_certs.sh
corpus=$(cd "$(dirname "$0")/../../fuzz/corpus/file" && pwd)
rm -rf "$dir" && mkdir -p "$dir" && "$make_files" "$dir" || exit 1
cd "$dir" || exit 1

failures=0
fail() {
  echo "FAIL: $last: $1" >&2
  echo "$out" | sed 's/^/    | /' >&2
  failures=$((failures + 1))
}
# run STATUS ARGS...: runs `hurray ARGS...`, keeping stdout and stderr in $out.
run() {
  expected=$1
  shift
  last="hurray $*"
  out=$("$hurray" "$@" 2>&1)
  status=$?
  [ "$status" -eq "$expected" ] || fail "exit status $status, expected $expected"
}
has() { case "$out" in *"$1"*) ;; *) fail "output lacks: $1" ;; esac; }
lacks() { case "$out" in *"$1"*) fail "output has: $1" ;; esac; }

# usage
run 2
has "usage: hurray [--version] [--help] COMMAND"
run 0 --help
has "info     list a file's tensors"
has "verify   check every buffer's checksum"
has "exit status (the same in every command):"
has "3  an input is not a valid file of its format"
has "5  the system refused"
has "6  the network or the peer refused"
run 0 -h
has "usage: hurray [--version] [--help] COMMAND"
run 0 --version
has "file format 2.2"
has "C ABI 4"
run 2 --nope
has "hurray: unknown option '--nope'"
run 2 -x
has "hurray: unknown option '-x'"
run 2 nonesuch good.hurray
has "unknown command 'nonesuch'"
run 0 help info
has "usage: hurray info [-bjp] FILE"
run 2 help nonesuch
has "unknown command 'nonesuch'"
run 0 info --help
has "usage: hurray info [-bjp] FILE"
has "  -j, --json "
has "exit status (the same in every command):"
run 0 verify -h
has "usage: hurray verify [-qp] FILE"
has "4  valid, but not supported"
run 0 convert --he # an unambiguous prefix
has "usage: hurray convert [options] IN OUT"
run 2 info
has "FILE is missing"
run 2 info --nope good.hurray
has "unknown option '--nope' (see hurray info --help)"
run 2 info -bx good.hurray
has "unknown option '-x'"
run 2 info --buffers=yes good.hurray
has "option '--buffers' takes no value"
run 2 verify good.hurray empty.hurray
has "one FILE expected, got 'good.hurray' and 'empty.hurray'"

# one exit status for one error, whichever command meets it
for command in info verify; do
  run 5 $command missing.hurray
  has "missing.hurray: No such file or directory (HURRAY_EIO)"
  run 3 $command not_hurray.txt
  has "not a Hurray file (bad magic), nor safetensors, .npy, .npz or GGUF by its first bytes (HURRAY_EFORMAT)"
  run 2 $command --bogus good.hurray
  run 0 $command --help
done
run 5 convert missing.hurray x.safetensors
has "No such file or directory (HURRAY_EIO)"
run 3 convert --from hurray not_hurray.txt x.safetensors
has "not a Hurray file (bad magic) (HURRAY_EFORMAT)"

# info
run 0 info good.hurray
has "good.hurray: Hurray file 2.0, 12 tensors"
has 'metadata: {"layers": 12, "model": "test", "quantised": true, "scale": 0.5, "tags": ["a", "b"]}'
has "dense: dense float32 [2, 3], 24 B in 1 buffer"
has "scalar: dense float64 [], 8 B in 1 buffer"
has "int4: dense int4 [3, 5]"
has "per_channel: per_channel int8 [4, 3] axis 0 with zero points, 32 B in 3 buffers"
has "block: block int4 [2, 8] axis 1 blocks of 4 with mins"
has "sparse_coo: sparse_coo float32 [4, 5] nnz 3 coalesced"
has "sparse_csr: sparse_csr float64 [3, 4] nnz 3"
has "paged: paged bfloat16 [2, 10, 4] axis 1 pages of 4 (6 pages)"
has "composite: composite, "
has "  weight: per_channel int4 [4, 8] axis 0"
has "    bias_view: dense float32 [4]"
has 'metadata: {"note": "red \u001b[31mtext\u001b[0m"}' # control characters escaped
lacks "$(printf '\033')"
lacks "buffer 0:"
run 0 info --buffers good.hurray
has "  buffer 1: scales, 16 B at offset "
has ", xxh3 "
run 0 info --pread -- good.hurray
has "12 tensors"
# format 2.1: null and integers outside int64 print as JSON's null and exact digits
run 0 info "$corpus/metadata_2_1.hurray"
has "Hurray file 2.1, 1 tensor"
has 'metadata: {"big": 18446744073709551616, "l": [null, {"x": null}], "low": -9223372036854775809, "n": null}'
has 'metadata: {"pad": null, "seed": -1000000000000000000000000000000}'
run 0 info --json "$corpus/metadata_2_1.hurray"
has '"format_version": [2, 1]'
has '"metadata": {"pad": null, "seed": -1000000000000000000000000000000}'
run 0 convert --metadata-json --drop-metadata "$corpus/metadata_2_1.hurray" meta21.safetensors
run 0 info good.hurray -bp # options after the operand, bundled
has "  buffer 1: scales, 16 B at offset "
run 0 info --buf good.hurray # an unambiguous prefix
has "  buffer 1: scales"
run 0 info bad_checksum.hurray # the index is intact; data is not read
run 0 info empty.hurray
has "0 tensors, 0 B of data in 0 buffers"
run 0 info --json good.hurray
has '"path": "good.hurray", "format": "hurray", "format_version": [2, 0]'
has '"metadata": {"layers": 12, "model": "test", "quantised": true, "scale": 0.5, "tags": ["a", "b"]}'
lacks "$(printf '\033')"
run 0 info -j empty.hurray
has '"tensor_count": 0, "buffer_count": 0, "data_bytes": 0'
has '"metadata": {}, "tensors": []}'
run 3 info --json not_hurray.txt
has "not a Hurray file (bad magic)"
if [ -n "$python" ] && "$python" -c "import json" >/dev/null 2>&1; then
  last="info --json read by Python's json"
  out=$("$hurray" info --json good.hurray | "$python" -c '
import json, sys
f = json.load(sys.stdin)
assert f["tensor_count"] == len(f["tensors"]) == 12, f
assert f["alignment"] == 64 and f["format_version"] == [2, 0]
t = {x["name"]: x for x in f["tensors"]}
assert t["dense"]["layout"] == "dense" and t["dense"]["dtype"] == "float32", t["dense"]
assert t["dense"]["shape"] == [2, 3] and t["dense"]["data_bytes"] == 24
assert t["dense"]["parts"] == [{"buffer": 0, "dtype": "float32", "byte_offset": 0,
                                "shape": [2, 3], "strides": None}], t["dense"]["parts"]
pc = t["per_channel"]
assert (pc["layout"], pc["dtype"], pc["axis"]) == ("per_channel", "int8", 0), pc
assert [b["role"] for b in pc["buffers"]] == ["values", "scales", "zero_points"], pc
assert all(b["offset"] % 64 == 0 and len(b["xxh3"]) == 16 for b in pc["buffers"])
assert t["block"]["block_size"] == 4 and t["sparse_coo"]["coalesced"] is True
assert t["paged"]["dtype"] == "bfloat16" and t["paged"]["axis"] == 1
c = t["composite"]
assert c["layout"] == "composite" and c["dtype"] is None and c["parts"] == []
assert c["children"][0]["name"] == "weight", c["children"]
assert c["children"][0]["layout"] == "per_channel"
assert any(k["name"] == "bias_view" for g in c["children"] for k in g["children"]), c
assert f["metadata"]["scale"] == 0.5 and f["metadata"]["tags"] == ["a", "b"]
assert any(x["metadata"].get("note") == "red \x1b[31mtext\x1b[0m" for x in f["tensors"])
print("json ok")
' 2>&1)
  has "json ok"
fi

# verify
run 0 verify good.hurray
has "good.hurray: ok, 12 tensors"
run 0 verify --quiet good.hurray
[ -z "$out" ] || fail "--quiet printed something"
run 0 verify --pread good.hurray
run 0 verify empty.hurray
has "ok, 0 tensors"
run 1 verify bad_checksum.hurray
has "tensor 'per_channel', buffer 1 (scales): checksum mismatch"
has "FAILED: 1 of 12 tensors do not match their checksums"
run 1 verify --pread -q bad_checksum.hurray
has "tensor 'per_channel'"

# bad files
run 3 verify truncated.hurray
has "truncated"
run 3 info not_hurray.txt
has "not a Hurray file (bad magic), nor safetensors, .npy, .npz or GGUF by its first bytes (HURRAY_EFORMAT)"
run 5 info missing.hurray
has "missing.hurray: No such file or directory"
run 5 verify . # a directory is a checkpoint: this one has no index and several files
has "holds no checkpoint index (*.index.json) but"
mkfifo fifo.hurray
run 5 info fifo.hurray # refused at once, not waiting for a writer
has "not a regular file"
# A malformed field the checksums cannot catch: the same status and exit code in every command.
run 3 info bad_field.hurray
has "buffer 0: "
has "(HURRAY_EFORMAT)"
run 3 verify bad_field.hurray
has "(HURRAY_EFORMAT)"
run 3 convert bad_field.hurray bad_field.npz
has "(HURRAY_EFORMAT)"
# A fault that only the check of the whole index finds (file-format.md §9): verify reports it
# before reading any data.
run 3 verify bad_total.hurray
has "the index header counts 5 buffers of 85 bytes but the records hold 5 of 84"
run 5 convert fifo.hurray fifo.npz
has "not a regular file"

# convert
run 0 convert --help
has "usage: hurray convert [options] IN OUT"
run 2 convert dense.hurray
has "IN and OUT are missing"
run 2 convert a b c
has "IN and OUT expected, got also 'c'"
run 2 convert --alignment 100 dense.hurray x.hurray
has "--alignment 100 is not a power of two"
run 2 convert --from bogus dense.hurray x.hurray
has "unknown format 'bogus'"
run 2 convert --name
has "option '--name' needs a value"
run 2 convert dense.hurray out.txt
has "cannot tell the format of"
run 0 convert dense.hurray dense.safetensors
has "dense.hurray -> dense.safetensors: "
has " of tensor data converted"
run 0 convert dense.safetensors back.hurray
run 0 info back.hurray
has "dense: dense float32 [2, 3], 24 B in 1 buffer"
has "scalar: dense float64 []"
run 0 convert --quiet dense.hurray dense.npz
[ -z "$out" ] || fail "--quiet printed something"
run 0 convert dense.npz back2.hurray
# info and verify read every format the loader reads, and say what each can be checked for
run 0 info dense.safetensors
has "dense.safetensors: safetensors file, 5 tensors"
has "dense: dense float32 [2, 3], 24 B in 1 buffer"
lacks "alignment"
run 0 info -b dense.safetensors
has "no checksum in this format"
run 0 info --json dense.npz
has '"format": "npz", "format_version": [0, 0]'
has '"xxh3": null'
run 0 info -b dense.npz
has "checked by its member's CRC-32"
run 0 verify dense.safetensors
has "dense.safetensors: ok, a safetensors file keeps no checksums: its header and where its 5 tensors lie were checked, its data cannot be"
run 0 verify -q dense.safetensors
[ -z "$out" ] || fail "--quiet printed something"
run 0 verify dense.npz
has "dense.npz: ok, 5 tensors"
has "verified against the members' CRC-32"
cp dense.npz bad.npz
# a byte of the first member's data (after its 30-byte local header, name and .npy header)
"$python" - <<'PY' 2>/dev/null || printf 'x' | dd of=bad.npz bs=1 seek=200 conv=notrunc 2>/dev/null
import zipfile
with zipfile.ZipFile("bad.npz") as z:
    info = z.infolist()[0]
at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size - 1
with open("bad.npz", "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0xFF]))
PY
run 1 verify bad.npz
has "FAILED"
run 2 convert dense.hurray dense.npy
has "holds 5 tensors: choose one by name"
run 0 convert --name=strided dense.hurray strided.npy
run 0 convert -n col -a 4096 strided.npy col.hurray
run 0 info col.hurray
has "alignment 4096"
has "col: dense float32 [4]"
run 0 convert -qa8192 -ncol2 strided.npy col2.hurray # bundled, values attached
[ -z "$out" ] || fail "-q printed something"
run 0 info col2.hurray
has "alignment 8192"
has "col2: dense float32 [4]"
run 0 convert --alignment=128 --name=col3 strided.npy col3.hurray
run 0 info col3.hurray
has "alignment 128"
run 0 convert --to npz --from hurray dense.hurray dense.zip
run 0 convert dense.zip back3.hurray # sniffed
run 4 convert good.hurray good.npz
has "the input has file metadata, which npz cannot hold"
run 4 convert --drop-metadata good.hurray good.safetensors
has "tensor 'int4' is int4, which safetensors has no dtype for (HURRAY_EUNSUPPORTED)"
[ ! -e good.safetensors ] || fail "a refused conversion left good.safetensors"
run 1 convert bad_checksum.hurray copy.hurray
has "checksum mismatch"
[ ! -e copy.hurray ] || fail "a failed conversion left copy.hurray"
run 3 convert not_hurray.txt x.hurray
has "neither its extension nor its first bytes tell the input's format"
run 3 convert truncated.hurray x.safetensors
has "truncated"
# --no-sync: no fsync, the same atomic replace (a failure leaves the previous file as it was)
run 0 convert --help
has "--no-sync       do not fsync OUT"
run 0 convert --no-sync dense.hurray nosync.safetensors
run 0 convert -q --no-sync nosync.safetensors nosync.hurray
run 0 verify nosync.hurray
has "nosync.hurray: ok, 5 tensors"
cp dense.hurray previous.hurray
run 1 convert --no-sync bad_checksum.hurray previous.hurray
has "checksum mismatch"
cmp -s dense.hurray previous.hurray || fail "a failed --no-sync conversion changed its OUT"
ls | grep -q '\.tmp-' && fail "a temporary file was left behind"

# the outputs loaded by numpy and safetensors, and theirs converted
if [ -n "$python" ] && "$python" -c "import numpy, safetensors" >/dev/null 2>&1; then
  last="interop with numpy and safetensors"
  out=$("$python" - "$hurray" 2>&1 <<'PYTHON'
import subprocess, sys
import numpy as np
from safetensors.numpy import load_file, save_file
st = load_file("dense.safetensors")
assert st["dense"].dtype == np.float32 and st["dense"].tolist() == [[1, 2, 3], [4, 5, 6]], st
assert st["strided"].tolist() == [0.5, 2.0, 3.5, 5.0], st["strided"]
assert st["scalar"].shape == () and st["empty"].shape == (0, 5)
z = np.load("dense.npz")
assert sorted(z.files) == ["dense", "empty", "negative", "scalar", "strided"], z.files
assert np.array_equal(z["negative"], st["negative"])
assert np.load("strided.npy").tolist() == [0.5, 2.0, 3.5, 5.0]
ref = {"f": np.asfortranarray(np.arange(12, dtype=">f4").reshape(3, 4)), "c": np.arange(5, dtype=np.complex128),
       "b": np.array([True, False]), "u": np.arange(7, dtype=np.uint64)}
np.savez_compressed("np.npz", **ref)
save_file({"x": np.arange(6, dtype=np.int16).reshape(2, 3)}, "theirs.safetensors", metadata={"format": "np"})
run = lambda *a: subprocess.run(list(a), check=True, capture_output=True)
run(sys.argv[1], "convert", "np.npz", "np.hurray")
run(sys.argv[1], "convert", "np.hurray", "np2.npz")
run(sys.argv[1], "convert", "--drop-metadata", "theirs.safetensors", "theirs.npz")
back = np.load("np2.npz")
for k, v in ref.items():
    assert np.array_equal(back[k], v) and back[k].dtype == v.dtype.newbyteorder("<"), (k, back[k])
assert np.load("theirs.npz")["x"].tolist() == [[0, 1, 2], [3, 4, 5]]
print("interop ok")
PYTHON
  )
  has "interop ok"
else
  echo "interop with numpy and safetensors: skipped (no Python with both)"
fi

# serve, ls, fetch over loopback (docs/spec/interchange.md)
run 2 serve
has "FILE missing"
run 5 serve nonesuch.hurray -a 127.0.0.1:0
run 2 serve good.hurray -a bad_name:80
has "neither a numeric IPv4/IPv6 address nor a host name"
run 2 serve --max-upload-total 0 good.hurray
has "--max-upload-total must be a positive number"
# safe defaults (ADR-092): beyond loopback only with a secret or --insecure
run 2 serve -a 0.0.0.0:0 good.hurray
has "0.0.0.0:0 is reachable beyond this host: give -s SECRET_FILE (and --tls-cert), or --insecure"
# serve_start OUT ARGS...: starts `hurray serve ARGS...` in the background, its stdout in OUT
# (stderr in OUT.err); $server its pid, $address the first line it printed.
serve_start() {
  file=$1
  shift
  rm -f "$file" "$file.err"
  "$hurray" serve "$@" >"$file" 2>"$file.err" &
  server=$!
  tries=0
  while [ ! -s "$file" ] && [ "$tries" -lt 100 ]; do sleep 0.1; tries=$((tries + 1)); done
  address=$(head -n 1 "$file")
  [ -n "$address" ] || { last="hurray serve $*"; out=$(cat "$file.err"); fail "no address"; }
}
serve_stop() {
  kill "$server"
  wait "$server" 2>/dev/null
}
# the first line is the address alone, also with -q; --json says what the server is
serve_start served_q.txt -q -a 127.0.0.1:0 good.hurray
last="serve -q"
out=$address
case "$address" in 127.0.0.1:[0-9]*) ;; *) fail "not an address alone" ;; esac
[ ! -s served_q.txt.err ] || { out=$(cat served_q.txt.err); fail "-q printed on stderr"; }
serve_stop
serve_start served_j.txt --json --insecure -u -a 0.0.0.0:0 good.hurray
last="serve --json --insecure"
out=$address
has '{"address": "0.0.0.0:'
has '", "devices": ["cpu"], "read_only": false, "authenticated": false, "tls": false, "insecure": true, "files": ["good.hurray"]}'
out=$(cat served_j.txt.err)
has "serving 1 file on 0.0.0.0:"
has ": uploads accepted, no secret, plaintext"
port=$(sed -n 's/^{"address": "0.0.0.0:\([0-9]*\)".*/\1/p' served_j.txt)
run 0 ls "127.0.0.1:$port"
has "dense  dense float32"
serve_stop
# --max-connections-per-address (ADR-099): a value given bounds loopback clients too; one
# connection held open from 127.0.0.1 (by Python, where there is one) leaves no room for ls
run 2 serve --max-connections-per-address 0 good.hurray
has "--max-connections-per-address must be a positive number up to 1048576, not '0'"
if [ -n "$python" ] && "$python" -c "import socket" >/dev/null 2>&1; then
  serve_start served_p.txt -q --max-connections-per-address 1 -a 127.0.0.1:0 good.hurray
  last="serve --max-connections-per-address 1"
  out=$("$python" - "$hurray" "$address" 2>&1 <<'PYTHON'
import socket, subprocess, sys, time
hurray, address = sys.argv[1:3]
host, port = address.rsplit(":", 1)
held = socket.create_connection((host, int(port)))
ls = subprocess.run([hurray, "ls", address], capture_output=True, text=True)
print("held: exit", ls.returncode, ls.stderr.strip())
held.close()
for _ in range(100):  # until the server has seen the held connection close
    ls = subprocess.run([hurray, "ls", address], capture_output=True, text=True)
    if ls.returncode == 0:
        break
    time.sleep(0.05)
print("closed: exit", ls.returncode, ls.stdout.splitlines()[0] if ls.stdout else ls.stderr)
PYTHON
  )
  has "held: exit 6 hurray ls: $address: peer: this server is at its limit of 1 connections from one address (HURRAY_EDENIED)"
  has "closed: exit 0 dense  dense float32 [2, 3]  1 buffer  24 B"
  serve_stop
fi
serve_start served.txt -a 127.0.0.1:0 good.hurray
last="serve"
out=$(cat served.txt.err)
has "serving 1 file on $address: read-only, no secret, plaintext"
run 0 ls "$address"
has "per_channel  per_channel int8 [4, 3]  3 buffers  32 B"
# a host name goes through the resolver: localhost, and a name of /etc/hosts that lists ::1
# before 127.0.0.1 (inside a user and mount namespace, where this machine allows one): the
# client tries each address in order, the first refused (the server is on IPv4 only)
port=${address##*:}
run 0 ls "localhost:$port"
has "scalar  dense float64 []  1 buffer  8 B"
run 2 ls "bad_name:$port"
has "nor a host name"
printf '::1 hurray-test.example\n127.0.0.1 hurray-test.example\n' >hosts.txt
if unshare -rm true 2>/dev/null; then
  out=$(unshare -rm sh -c 'mount --bind hosts.txt /etc/hosts && exec "$0" ls "$1"' "$hurray" \
    "hurray-test.example:$port" 2>&1)
  last="ls hurray-test.example (::1 first)"
  has "scalar  dense float64 []  1 buffer  8 B"
fi
has "paged  paged bfloat16 [2, 10, 4]  2 buffers  216 B"
has "scalar  dense float64 []  1 buffer  8 B"
has "composite  composite  2 buffers  96 B"
run 0 fetch "$address" composite -o fetched.hurray
has "fetched composite into fetched.hurray"
run 0 info fetched.hurray
has "composite: composite, 96 B in 2 buffers"
has "bias_view: dense float32 [4]"
run 0 verify fetched.hurray
run 0 fetch -q "$address" strided
[ -z "$out" ] || fail "-q printed something"
run 0 info strided.hurray
has "strided: dense float32 [4], 40 B in 1 buffer"
run 0 fetch "$address" dense -o noted.hurray
run 0 info noted.hurray
has "metadata: {\"note\""
run 0 fetch "$address" dense --rows 1:2 -o row.hurray
run 0 info row.hurray
has "dense: dense float32 [1, 3], 12 B in 1 buffer"
run 2 fetch "$address" nonesuch
has "no tensor named 'nonesuch' (HURRAY_EINVAL)"
run 4 fetch "$address" sparse_coo --rows 0:1
has "rows need a dense tensor"
run 2 fetch "$address" dense --rows 2:1
has "--rows must be START:STOP"
# --bytes: that range of the tensor's data, raw, each frame checked; --no-sync as convert's
run 0 fetch --help
has "--bytes START:STOP   only bytes [START, STOP) of the tensor's data"
has "--no-sync            do not fsync OUT"
run 0 fetch "$address" dense --bytes 0:24 -o whole.bin
has "fetched bytes [0, 24) of dense into whole.bin"
run 0 fetch "$address" dense --bytes 4:20 -o part.bin
[ "$(wc -c <part.bin)" -eq 16 ] || fail "part.bin is not 16 bytes"
dd if=whole.bin of=expected.bin bs=1 skip=4 count=16 2>/dev/null
cmp -s expected.bin part.bin || fail "bytes [4, 20) differ from those of [0, 24)"
run 0 fetch -q --no-sync "$address" scalar --bytes 0:8
[ "$(wc -c <scalar.bin)" -eq 8 ] || fail "scalar.bin is not 8 bytes"
run 2 fetch "$address" dense --bytes 0:25 -o over.bin
has "bytes [0, 25) are outside tensor 'dense' (24 bytes) (HURRAY_EINVAL)"
[ ! -e over.bin ] || fail "a refused range left a file"
run 2 fetch "$address" dense --bytes 3:3
has "--bytes must be START:STOP with 0 <= START < STOP, not '3:3'"
run 2 fetch "$address" dense --rows 0:1 --bytes 0:4
has "--rows and --bytes exclude each other"
run 0 fetch --no-sync "$address" composite -o nosync_fetch.hurray
run 0 verify nosync_fetch.hurray
# an OUT of another format the loader reads is written in it (ADR-092), nothing left beside it
run 0 fetch "$address" strided -o strided.npy
has "fetched strided into strided.npy"
run 0 info strided.npy
has "strided.npy: npy file, 1 tensor, 16 B of data in 1 buffer"
run 0 fetch -q "$address" scalar -o scalar.safetensors
run 0 info scalar.safetensors
has "scalar: dense float64 [], 8 B in 1 buffer"
run 4 fetch "$address" dense -o dense_m.npy
has "tensor 'dense' has metadata of its own, which npy cannot hold"
[ ! -e dense_m.npy ] || fail "a refused conversion left its output"
run 0 fetch --drop-metadata "$address" dense -o dense_m.npy
run 4 fetch "$address" paged -o paged.npz
has "tensor 'paged' is a paged tensor: npz holds dense arrays only (HURRAY_EUNSUPPORTED)"
leftover=$(ls ./*.fetch-* 2>/dev/null)
[ -z "$leftover" ] || { out=$leftover; fail "a staged fetch was left behind"; }
serve_stop
last="serve's summary"
out=$(cat served.txt)
has "served 13 tensors: 628 B sent, 0 B passed as file descriptors"
run 6 ls "$address"
has "Connection refused (HURRAY_ECONNECTION)"
# serve takes every format the loader reads (ADR-092): safetensors, .npz, a checkpoint directory
for served in dense.safetensors dense.npz; do
  serve_start served_f.txt -a 127.0.0.1:0 "$served"
  run 0 ls "$address"
  has "negative  dense int16 [3, 2]  1 buffer  12 B"
  run 0 fetch -q "$address" dense -o "from_$served.hurray"
  run 0 info "from_$served.hurray"
  has "dense: dense float32 [2, 3], 24 B in 1 buffer"
  run 0 verify "from_$served.hurray"
  serve_stop
done
mkdir -p ckpt && cp good.hurray ckpt/
serve_start served_d.txt -a 127.0.0.1:0 ckpt
run 0 ls "$address"
has "per_channel  per_channel int8 [4, 3]  3 buffers  32 B"
run 0 fetch -q "$address" composite -o from_ckpt.hurray
run 0 verify from_ckpt.hurray
serve_stop
run 3 serve -a 127.0.0.1:0 not_hurray.txt
has "nor safetensors, .npy, .npz or GGUF by its first bytes (HURRAY_EFORMAT)"
printf 's3cret\n' >secret.txt
serve_start served2.txt -s secret.txt -a 127.0.0.1:0 good.hurray
run 6 ls "$address"
has "the server requires a shared secret and none was given (HURRAY_EAUTH)"
run 0 ls -s secret.txt "$address"
has "dense  dense float32"
last="ls with HURRAY_SECRET"
out=$(HURRAY_SECRET=wrong "$hurray" ls "$address" 2>&1)
has "authentication failed: wrong secret"
kill "$server"
wait "$server" 2>/dev/null

# over TLS, with certificates made now (tests/tls/make_certs.sh)
mkdir -p certs && sh "$make_certs" certs
run 2 serve --tls-cert certs/server.pem good.hurray
has "--tls-cert and --tls-key go together"
serve_start served3.txt --tls-cert certs/server.pem --tls-key certs/server.key -s secret.txt \
  -a 127.0.0.1:0 good.hurray
case "$address" in hurrays://127.0.0.1:*) ;; *) out=$address; fail "not a hurrays:// address" ;; esac
run 0 ls --tls-ca certs/ca.pem -s secret.txt "$address"
has "dense  dense float32"
run 0 fetch -q --tls-ca certs/ca.pem -s secret.txt "$address" dense -o tls.hurray
run 0 verify tls.hurray
run 6 ls --tls-ca certs/other-ca.pem -s secret.txt "$address"
has "TLS: the server's certificate is refused: unable to get local issuer certificate"
run 6 ls --tls-ca certs/ca.pem --tls-server-name example.com -s secret.txt "$address"
has "hostname mismatch (HURRAY_EAUTH)"
run 6 ls -s secret.txt "${address#hurrays://}"
has "this server speaks TLS only: connect with hurrays:// (HURRAY_EPROTOCOL)"
run 2 ls --tls-ca certs/ca.pem -s secret.txt "${address#hurrays://}"
has "use hurrays://"
kill "$server"
wait "$server" 2>/dev/null

# progress, when stderr is a terminal (where `script` can provide one)
if command -v script >/dev/null 2>&1 && script -qec true /dev/null >/dev/null 2>&1; then
  last="verify on a terminal"
  out=$(script -qec "'$hurray' verify good.hurray" /dev/null 2>&1)
  has "verifying: 100%"
  has "ok, 12 tensors"
  last="convert on a terminal"
  out=$(script -qec "'$hurray' convert dense.hurray tty.safetensors" /dev/null 2>&1)
  has "converting: 100%"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures CLI check(s) failed" >&2
  exit 1
fi
echo "all CLI checks passed"
