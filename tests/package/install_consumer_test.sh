#!/usr/bin/env bash
# The installed package end to end (README "Install"): installs this build into a temporary prefix, moves the
# prefix (the package must be relocatable), builds examples/consumer against it with find_package(facetrace
# CONFIG), runs it with no FACETRACE_GPUD, and checks that it rendered a PNG and found the GPU child of the moved
# prefix. Also runs the installed CLI, which must find its GPU child in libexec/facetrace/ on its own.
#   install_consumer_test.sh <build dir> <source dir> <c++ compiler> [extra cmake args for the consumer...]
set -euo pipefail
build=$1 src=$2 cxx=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset FACETRACE_GPUD
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/staged" > "$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
mv "$tmp/staged" "$tmp/prefix"
p=$tmp/prefix
for f in bin/facetrace libexec/facetrace/facetrace-gpud include/facetrace/tracer/renderer.h; do
  [ -e "$p/$f" ] || fail "not installed: $f"
done
config=$(find "$p" -name facetraceConfig.cmake) || true
[ -n "$config" ] || fail "no facetraceConfig.cmake under the prefix"
[ -n "$(find "$p" -name facetraceConfigVersion.cmake)" ] || fail "no facetraceConfigVersion.cmake"

cmake -S "$src/examples/consumer" -B "$tmp/consumer" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_PREFIX_PATH="$p" "$@" > "$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "consumer configure"; }
cmake --build "$tmp/consumer" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "consumer build"; }

out=$("$tmp/consumer/consumer" "$tmp/diamond.png" 2>&1) || { echo "$out"; fail "consumer run"; }
echo "$out"
[ "$(head -c 8 "$tmp/diamond.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "no PNG written"
grep -qx "facetrace-gpud: $p/libexec/facetrace/facetrace-gpud" <<< "$out" ||
  fail "the consumer did not find the moved prefix's facetrace-gpud"

info=$("$p/bin/facetrace" info 2>&1) || true
echo "$info"
if grep -q "facetrace-gpud not found" <<< "$info"; then fail "the installed CLI did not find its GPU child"; fi
"$p/bin/facetrace" render --width 16 --height 12 --spp 1 --quiet -o "$tmp/cli.png" || fail "installed CLI render"
[ -s "$tmp/cli.png" ] || fail "installed CLI wrote no PNG"
echo "PASS"
