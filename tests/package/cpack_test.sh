#!/usr/bin/env bash
# CPack end to end (README "Install"): builds the TGZ and DEB packages of this build into a temporary folder and
# checks the split: the runtime package holds the CLI and the GPU child (in libexec/facetrace/), the dev package the
# headers, the static libraries and the CMake package, and the DEB dev package depends on the runtime one.
#   cpack_test.sh <build dir>
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cpack --config "$build/CPackConfig.cmake" -B "$tmp" -G "TGZ;DEB" > "$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; fail "cpack"; }
ls "$tmp"
tgz_runtime=$(ls "$tmp"/facetrace-*-runtime.tar.gz) || fail "no runtime TGZ"
tgz_dev=$(ls "$tmp"/facetrace-*-dev.tar.gz) || fail "no dev TGZ"
deb_runtime=$(ls "$tmp"/facetrace_*.deb) || fail "no runtime DEB"
deb_dev=$(ls "$tmp"/facetrace-dev_*.deb) || fail "no dev DEB"

has() { grep -qE "$2" <<< "$1" || fail "$3 lacks $2"; }
lacks() { if grep -qE "$2" <<< "$1"; then fail "$3 holds $2"; fi; }
t=$(tar -tzf "$tgz_runtime"); has "$t" "^bin/facetrace$" runtime.tgz; has "$t" "^libexec/facetrace/facetrace-gpud$" runtime.tgz
lacks "$t" "^include/facetrace/" runtime.tgz
t=$(tar -tzf "$tgz_dev"); has "$t" "^include/facetrace/tracer/renderer.h$" dev.tgz
has "$t" "/cmake/facetrace/facetraceConfig.cmake$" dev.tgz; has "$t" "/libft_core\.a$" dev.tgz; lacks "$t" "(^|/)bin/facetrace$" dev.tgz
if command -v dpkg-deb > /dev/null; then
  t=$(dpkg-deb -c "$deb_runtime"); has "$t" "usr/bin/facetrace$" runtime.deb
  has "$t" "usr/libexec/facetrace/facetrace-gpud$" runtime.deb
  t=$(dpkg-deb -c "$deb_dev"); has "$t" "usr/lib/cmake/facetrace/facetraceConfig.cmake$" dev.deb
  dep=$(dpkg-deb -f "$deb_dev" Depends); echo "facetrace-dev Depends: $dep"; has "$dep" "(^|, )facetrace( |,|$)" dev.deb
  echo "facetrace Depends: $(dpkg-deb -f "$deb_runtime" Depends)"
fi
echo "PASS"
