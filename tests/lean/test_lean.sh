#!/bin/sh
# test_lean.sh LIBHURRAY EXCHANGE_SHARED EXCHANGE_STATIC HURRAY WORK -- libhurray.so needs
# nothing beyond libc at load time (ADR-073):
#   - its NEEDED entries are libc's (and xxHash's, were it linked; a sanitizer's runtime in
#     those builds);
#   - ldd of a program that only exchanges tensors (examples/exchange.c, linked to the shared
#     and to the static library) and of the `hurray` command shows no libssl, libcrypto or zlib;
#   - the exchange runs with broken libssl.so.3, libcrypto.so.3 and libz.so.1 first on the
#     loader's path, so it does not touch them at run time either;
#   - where TLS or inflate is used and its library cannot be loaded, the command says which
#     library, and why, as HURRAY_EUNSUPPORTED (exit status 4), while stored .npz members
#     (CRC-32 in-tree) convert without zlib.
set -u
lib=$1 exchange_shared=$2 exchange_static=$3 hurray=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" || exit 1
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# -- what the loader needs ------------------------------------------------------------------
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "$lib needs: $(echo $needed)"
for so in $needed; do
  case $so in
    libc.so.* | libpthread.so.* | libdl.so.* | libxxhash.so.*) ;;
    libasan.so.* | libubsan.so.* | libtsan.so.* | liblsan.so.*) ;; # a sanitizer build's runtime
    *) fail "$lib needs $so at load time" ;;
  esac
done
for program in "$lib" "$exchange_shared" "$exchange_static" "$hurray"; do
  deps=$(ldd "$program") || fail "ldd $program failed"
  case $deps in
    *libssl* | *libcrypto* | *libz.so*) fail "ldd $program shows: $(echo "$deps" | grep -E 'libssl|libcrypto|libz\.so')" ;;
  esac
done
case $(ldd "$exchange_shared") in
  *libhurray.so*) ;;
  *) fail "$exchange_shared is not linked to libhurray.so" ;;
esac

# -- broken copies of the optional libraries, first on the loader's path --------------------
broken() { # DIR LIBRARY...: DIR holds files of those names that are no libraries
  mkdir -p "$1" && dir=$1 && shift
  for so in "$@"; do printf 'not a library\n' >"$dir/$so"; done
}
broken "$work/none" libssl.so.3 libcrypto.so.3 libz.so.1
broken "$work/nossl" libssl.so.3
LD_LIBRARY_PATH=$work/none "$exchange_shared" >/dev/null || fail "exchange needs an optional library"
LD_LIBRARY_PATH=$work/none "$exchange_static" >/dev/null || fail "exchange (static) needs an optional library"

# run DIR STATUS ARGS...: `hurray ARGS...` with DIR first on the loader's path; output in $out.
run() {
  path=$1 expected=$2
  shift 2
  last="hurray $*"
  out=$(LD_LIBRARY_PATH=$path "$hurray" "$@" 2>&1)
  status=$?
  [ "$status" -eq "$expected" ] || fail "$last: exit status $status, expected $expected: $out"
}
has() { case "$out" in *"$1"*) ;; *) fail "$last: output lacks: $1; it is: $out" ;; esac; }

run "$work/none" 4 ls hurrays://127.0.0.1:9
has "hurrays:// needs libcrypto.so.3, which could not be loaded: $work/none/libcrypto.so.3: "
has "(HURRAY_EUNSUPPORTED)"
run "$work/nossl" 4 ls hurrays://127.0.0.1:9
has "hurrays:// needs libssl.so.3, which could not be loaded: $work/nossl/libssl.so.3: "
run "$work/nossl" 4 serve --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" 127.0.0.1:0 "$work/x"
has "hurrays:// needs libssl.so.3, which could not be loaded"
run "$work/none" 0 ls --help # plaintext and everything else: nothing is loaded

npz=$here/deflated.npz # numpy.savez_compressed: x = arange(6, float32) as [2, 3], deflated
run "$work/none" 4 convert "$npz" "$work/x.hurray"
has "reading a deflated .npz member needs libz.so.1, which could not be loaded: $work/none/libz.so.1: "
[ ! -e "$work/x.hurray" ] || fail "a failed convert left $work/x.hurray"
run "" 0 convert "$npz" "$work/x.hurray"
run "$work/none" 0 convert "$work/x.hurray" "$work/stored.npz"
run "$work/none" 0 convert "$work/stored.npz" "$work/back.hurray"
run "$work/none" 0 info "$work/back.hurray"
has "x: dense float32 [2, 3], 24 B in 1 buffer"

[ "$failures" -eq 0 ] || { echo "$failures failures" >&2; exit 1; }
echo "libhurray.so and its programs need nothing beyond libc at load time"
