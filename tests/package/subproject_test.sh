#!/usr/bin/env bash
# facetrace as a subproject (README "Install"): a project that add_subdirectory()s this tree gets the
# facetrace:: ALIAS targets and no tests, benchmarks or install rules of facetrace's own. Configures only.
#   subproject_test.sh <source dir> [extra cmake args...]
set -euo pipefail
src=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/super"
cat > "$tmp/super/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.24)
project(super LANGUAGES CXX)
add_subdirectory("$src" facetrace)
foreach(t core runtime tracer faces)
  if(NOT TARGET facetrace::\${t})
    message(FATAL_ERROR "no facetrace::\${t}")
  endif()
endforeach()
foreach(v FT_BUILD_TESTS FT_BUILD_BENCHMARKS FT_INSTALL)
  if(\${v})
    message(FATAL_ERROR "\${v} is ON in a subproject")
  endif()
endforeach()
foreach(t core_test bench_tracer package_install_consumer)
  if(TARGET \${t})
    message(FATAL_ERROR "the subproject built \${t}")
  endif()
endforeach()
CMAKE
cmake -S "$tmp/super" -B "$tmp/build" "$@" > "$tmp/log" 2>&1 || { cat "$tmp/log"; echo "FAIL: configure"; exit 1; }
if [ -e "$tmp/build/facetrace/CTestTestfile.cmake" ] && grep -q add_test "$tmp/build/facetrace/CTestTestfile.cmake"; then
  echo "FAIL: the subproject registered tests"; exit 1
fi
echo PASS
