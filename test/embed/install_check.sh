#!/usr/bin/env bash
# Installs hetplan into a fresh prefix and builds examples/embed out of tree
# against it, as a user would (docs/packaging.md):
#   1. cmake --install BUILD --prefix WORK/prefix
#   2. find_package(hetplan): the installed share/hetplan/examples/embed
#      project (C11 embed_example, C++17 embed_session, -Wall -Wextra
#      -pedantic -Werror), configured with CMAKE_PREFIX_PATH only;
#   3. pkg-config hetplan: the same two files compiled by hand with
#      -std=c11 / -std=c++17 and the same warnings as errors;
#   4. the installed `hetplan` compiles the installed gpt2-tiny for 3 ranks,
#      and every built program runs on the model and on that plan.
#   install_check.sh BUILD WORK
set -euo pipefail
BUILD=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
P=$WORK/prefix
step() { echo "== $*"; }
die() { echo "FAIL: $*"; exit 1; }

step "cmake --install $BUILD --prefix $P"
cmake --install "$BUILD" --prefix "$P" > "$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; die "install"; }
for f in include/hetplan/hetplan.h include/hetplan/runtime/Session.h include/hetplan/runtime/Tensor.h \
         lib/cmake/hetplan/hetplanConfig.cmake lib/cmake/hetplan/hetplanConfigVersion.cmake \
         lib/pkgconfig/hetplan.pc share/hetplan/examples/embed/CMakeLists.txt share/hetplan/models/gpt2-tiny.onnx; do
  [ -e "$P/$f" ] || die "$f was not installed"
done
ls "$P"/lib/libhetplan.so* > /dev/null || die "libhetplan.so was not installed"
MODEL=$P/share/hetplan/models/gpt2-tiny.onnx

step "find_package(hetplan): build share/hetplan/examples/embed out of tree"
GEN=()
command -v ninja > /dev/null && GEN=(-G Ninja)
cmake "${GEN[@]}" -S "$P/share/hetplan/examples/embed" -B "$WORK/cmake-build" -DCMAKE_PREFIX_PATH="$P" \
  -DCMAKE_BUILD_TYPE=Release > "$WORK/configure.log" 2>&1 || { cat "$WORK/configure.log"; die "configure"; }
cmake --build "$WORK/cmake-build" > "$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; die "build"; }
# A version this package does not satisfy is refused.
mkdir -p "$WORK/version-probe"
cat > "$WORK/version-probe/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(probe LANGUAGES NONE)
find_package(hetplan 0.2 CONFIG)
if(hetplan_FOUND)
  message(FATAL_ERROR "hetplan 0.2 was found in a 0.1 install")
endif()
CM
cmake -S "$WORK/version-probe" -B "$WORK/version-probe/b" -DCMAKE_PREFIX_PATH="$P" > "$WORK/probe.log" 2>&1 ||
  { cat "$WORK/probe.log"; die "version check"; }

step "pkg-config hetplan: strict C11 and C++17 by hand"
export PKG_CONFIG_PATH=$P/lib/pkgconfig
pkg-config --exists hetplan || die "pkg-config does not find hetplan"
LIBDIR=$(pkg-config --variable=libdir hetplan)
[ "$(cd "$LIBDIR" && pwd)" = "$(cd "$P/lib" && pwd)" ] || die "hetplan.pc's libdir $LIBDIR is not $P/lib"
pkg-config --variable=plan_schema_version hetplan | grep -qx "[0-9][0-9]*" || die "hetplan.pc has no plan_schema_version"
SRC=$P/share/hetplan/examples/embed
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -pedantic -Werror "$SRC/embed_example.c" -o "$WORK/pc_embed_example" \
  $(pkg-config --cflags --libs hetplan) -pthread -Wl,-rpath,"$LIBDIR" || die "C11 build with pkg-config"
# shellcheck disable=SC2046
c++ -std=c++17 -Wall -Wextra -pedantic -Werror "$SRC/embed_session.cpp" -o "$WORK/pc_embed_session" \
  $(pkg-config --cflags --libs hetplan) -Wl,-rpath,"$LIBDIR" || die "C++17 build with pkg-config"

PLAN=
if [ -x "$P/bin/hetplan" ]; then
  step "the installed hetplan compiles a 3-rank plan"
  PLAN=$WORK/tiny.plan
  "$P/bin/hetplan" compile "$MODEL" --cluster 3xT4 --mode infer --batch 6 --seq 16 --quiet -o "$PLAN" ||
    die "installed hetplan compile"
fi

step "run the programs"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for exe in "$WORK/cmake-build/embed_example" "$WORK/pc_embed_example"; do
  out=$("$exe" --threads 2 --requests 8 --seq 8 "$MODEL") || die "$exe on the model: $out"
  echo "$out" | grep -q "8 requests \[1x8\] on 2 threads: .* 0 failed" || die "$exe: unexpected output: $out"
  if [ -n "$PLAN" ]; then
    out=$("$exe" --threads 2 --requests 4 "$PLAN") || die "$exe on the plan: $out"
    echo "$out" | grep -q "plan .* (3 ranks;" || die "$exe: not run as a 3-rank plan: $out"
    echo "$out" | grep -q "4 requests \[6x16\] on 2 threads: .* 0 failed" || die "$exe: unexpected output: $out"
  fi
  echo "$exe: ok"
done
for exe in "$WORK/cmake-build/embed_session" "$WORK/pc_embed_session"; do
  out=$(cd "$WORK" && "$exe" --threads 1 --profile "$WORK/trace" "$MODEL") || die "$exe on the model: $out"
  echo "$out" | grep -q "model .* 2 runs of input_ids \[2x8\] -> logits float32\[2x8x512\]" || die "$exe: $out"
  trace=$(echo "$out" | sed -n 's/^profile: //p')
  grep -q '"traceEvents"' "$trace" || die "$exe: no trace in $trace"
  if [ -n "$PLAN" ]; then
    out=$("$exe" "$PLAN") || die "$exe on the plan: $out"
    echo "$out" | grep -q "plan .* on 3 rank(s): 2 runs of input_ids \[6x16\] -> logits float32\[6x16x512\]" ||
      die "$exe: $out"
  fi
  echo "$exe: ok"
done
PYPKG=$P/lib/python3/dist-packages
if [ -d "$PYPKG/hetplan" ] && [ -n "$PLAN" ]; then
  step "the installed Python package finds the installed hetplan and runs the plan"
  out=$(cd "$WORK" && env -u HETPLAN_EXECUTABLE PYTHONPATH="$PYPKG" PATH=/usr/bin:/bin /usr/bin/python3 -c "
import os, numpy as np, hetplan
assert os.path.realpath(hetplan.executable()) == os.path.realpath('$P/bin/hetplan'), hetplan.executable()
plan = hetplan.compile('$MODEL', cluster='3xT4', batch=6, seq=16)
out = hetplan.Session(plan).run({'input_ids': np.ones((6, 16), np.int64)})['logits']
print('python', plan.ranks, out.shape)
") || die "installed Python package: $out"
  echo "$out" | grep -q "python 3 (6, 16, 512)" || die "installed Python package: $out"
  echo "$out"
fi
echo PASS
