#!/bin/sh
# test_install.sh CMAKE BUILD WORK MAKE_FILES CC GENERATOR MAKE_PROGRAM -- installs the build
# directory BUILD into WORK/prefix, then builds examples/exchange.c and examples/simple.c
# against the installed tree alone, as a C user would: with find_package(hurray) (shared and
# static library) and with pkg-config, and runs each program. Also checks that the shared
# library's SONAME carries the C ABI version of the installed header, and that nothing links or
# needs zlib or OpenSSL (ADR-073).
set -eu
cmake=$1 build=$2 work=$3 make_files=$4 cc=$5 generator=$6 make_program=$7
here=$(cd "$(dirname "$0")" && pwd)
examples=$here/../../examples
prefix=$work/prefix
rm -rf "$work"
mkdir -p "$work/files"
step() { echo "== $*"; }

step "cmake --install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
header=$prefix/include/hurray/hurray.h
[ -f "$prefix/include/hurray/version.h" ]
abi=$(sed -n 's/^#define HURRAY_C_ABI_VERSION \([0-9][0-9]*\)$/\1/p' "$header")
libdir=$(dirname "$(find "$prefix" -name libhurray.a)")
[ -f "$libdir/cmake/hurray/hurrayConfig.cmake" ] && [ -f "$libdir/pkgconfig/hurray.pc" ]
soname=$(objdump -p "$libdir/libhurray.so" | awk '$1 == "SONAME" { print $2 }')
echo "C ABI $abi, SONAME $soname"
[ "$soname" = "libhurray.so.$abi" ] || { echo "SONAME is not libhurray.so.$abi" >&2; exit 1; }
[ -e "$libdir/libhurray.so.$abi" ]

"$make_files" "$work/files" >/dev/null
expect_simple() { # PROGRAM: reads good.hurray's "dense" tensor
  out=$("$1" "$work/files/good.hurray" dense)
  [ "$out" = "dense tensor of shape [2, 3]: 1 2 3 4 5 6" ] || { echo "$1 printed: $out" >&2; exit 1; }
}

step "find_package(hurray): hurray::hurray and hurray::hurray_static"
if grep -E "ZLIB|OpenSSL|libz|libssl|libcrypto" "$libdir"/cmake/hurray/hurrayTargets*.cmake; then
  echo "the CMake package names zlib or OpenSSL" >&2
  exit 1
fi
"$cmake" -S "$here" -B "$work/cmake" -G "$generator" -DCMAKE_MAKE_PROGRAM="$make_program" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Werror" \
  >/dev/null
"$cmake" --build "$work/cmake" >/dev/null
for library in hurray hurray_static; do
  "$work/cmake/exchange_$library" >/dev/null
  expect_simple "$work/cmake/simple_$library"
done
objdump -p "$work/cmake/exchange_hurray" | grep -q "NEEDED *libhurray.so.$abi"
if objdump -p "$work/cmake/exchange_hurray_static" | grep -q "NEEDED *libhurray"; then
  echo "exchange_hurray_static needs libhurray.so" >&2
  exit 1
fi

step "pkg-config hurray"
PKG_CONFIG_PATH=$libdir/pkgconfig
export PKG_CONFIG_PATH
# zlib and OpenSSL are loaded at run time (ADR-073): nothing of them is linked, static or not.
static_libs=$(pkg-config --static --libs hurray)
echo "pkg-config --static --libs hurray: $static_libs"
case " $static_libs " in
  *" -lz "* | *-lssl* | *-lcrypto*) echo "the static link line names zlib or OpenSSL" >&2; exit 1 ;;
esac
for example in exchange simple; do
  # shellcheck disable=SC2046 # the flags are words
  "$cc" -std=c11 -Wall -Werror "$examples/$example.c" -o "$work/${example}_pc" \
    $(pkg-config --cflags --libs hurray) -lm -Wl,-rpath,"$(pkg-config --variable=libdir hurray)"
done
"$work/exchange_pc" >/dev/null
expect_simple "$work/simple_pc"
for program in "$work/cmake/exchange_hurray" "$work/cmake/exchange_hurray_static" \
               "$work/exchange_pc" "$libdir/libhurray.so"; do
  if ldd "$program" | grep -E "libssl|libcrypto|libz\.so"; then
    echo "$program needs zlib or OpenSSL at load time" >&2
    exit 1
  fi
done
echo "the installed tree works with find_package and pkg-config"
