#!/usr/bin/env bash
# cmake --install into a temporary prefix, then build examples/train_and_generate.c
# against it twice: with pkg-config (the .pc file and the header alone), and as a CMake
# project with find_package(bagualu) (the package config and its imported target); run
# the first. Why it can fail: a header, library, SONAME link, .pc or package file that is
# not installed or wrong; an internal header installed or needed.
BUILD=$1 SRC=$2
command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config"; exit 77; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cmake --install "$BUILD" --prefix "$D/prefix" >"$D/install.log" 2>&1 || { cat "$D/install.log"; exit 1; }
PC=$(dirname "$(find "$D/prefix" -name bagualu.pc | head -1)")
LIB=$(dirname "$(find "$D/prefix" -name 'libbagualu.so.0' | head -1)")
[ -n "$PC" ] && [ -n "$LIB" ] || { echo "bagualu.pc or libbagualu.so.0 not installed"; find "$D/prefix"; exit 1; }
headers=$(cd "$D/prefix/include" && find . -type f | sort | tr '\n' ' ')
[ "$headers" = "./bagualu.h " ] || { echo "installed headers: $headers (want bagualu.h alone)"; exit 1; }
[ -f "$LIB/libbagualu.a" ] || { echo "libbagualu.a not installed"; exit 1; }
flags=$(PKG_CONFIG_PATH=$PC pkg-config --cflags --libs bagualu) || { echo "pkg-config bagualu failed"; exit 1; }
cc -std=c11 -Wall -Wextra -Werror "$SRC/examples/train_and_generate.c" $flags -Wl,-rpath,"$LIB" \
  -o "$D/example" || { echo "the example does not build against the install ($flags)"; exit 1; }
"$D/example" "$SRC/configs/tiny_moe.json" || { echo "the installed example failed"; exit 1; }
mkdir "$D/consumer"
cat >"$D/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(bagualu 0.1 REQUIRED)
add_executable(example "$SRC/examples/train_and_generate.c")
target_link_libraries(example PRIVATE bagualu::bagualu)
CMAKE
{ cmake -S "$D/consumer" -B "$D/consumer/build" -DCMAKE_PREFIX_PATH="$D/prefix" &&
  cmake --build "$D/consumer/build"; } >"$D/consumer.log" 2>&1 ||
  { cat "$D/consumer.log"; echo "find_package(bagualu) or its target failed"; exit 1; }
echo "test_installed: installed, built with pkg-config ($flags) and find_package, ran"
