#!/usr/bin/env bash
# cudaemu.sh: run the GPU engine's tests on this CPU, through cudaemu (an
# emulated CUDA driver and NVRTC, tools/cudaemu/README.md). No GPU needed.
#
#   scripts/cudaemu.sh build                 # builds out/cudaemu/{libcuda.so.1,libnvrtc.so.12}
#   scripts/cudaemu.sh test PKG [go test flags…]
#       e.g. scripts/cudaemu.sh test ./pkg/gpu/gpukernels -run 'MMA2|Rows' -v
#   scripts/cudaemu.sh env                   # prints the exports, to run a test binary by hand
#
# What it proves: the kernels compute what their Go references do, in the
# same float order (the emulated kernels round every product and sum like
# NVRTC --fmad=false), and the engine's streams, events, graphs and copies
# are ordered as CUDA requires (NVMAI_CUDAEMU_SCHED=lazy runs queued work as
# late as CUDA allows). What it cannot: speed, or anything that depends on
# blocks running at once (blocks run one after another). A change is
# validated on a GPU by scripts/gpu-check.sh; cudaemu catches the bugs
# before device time is spent on them.
#
# Needs g++ (C++17). Kernels compile with g++ the first time (30-90 s for
# kernels.cu) and are cached in out/cudaemu/cache/<hash of the emulator's sources>.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
out=${NVMAI_CUDAEMU_OUT:-$root/out/cudaemu}
src=$root/tools/cudaemu

build() {
	mkdir -p "$out"
	local lib=$out/libcuda.so.1
	if [ ! -f "$lib" ] || [ -n "$(find "$src" -newer "$lib" -name '*.cc' -o -newer "$lib" -name '*.h' 2>/dev/null)" ]; then
		echo "cudaemu: building $lib" >&2
		"${CXX:-g++}" -std=c++17 -O2 -g -fPIC -shared -Wall -Wno-unused-function -o "$lib.tmp" "$src/driver.cc" "$src/runtime.cc" -ldl
		mv "$lib.tmp" "$lib"
	fi
	cp "$src/cudaemu.h" "$out/cudaemu.h"
	ln -sf libcuda.so.1 "$out/libnvrtc.so.12"
}

envs() {
	# The compiled kernels are cached by the source NVRTC is given; the
	# emulation's own sources change what they compile to, so they name the cache.
	local key
	key=$(cat "$src/cudaemu.h" "$src/driver.cc" "$src/runtime.cc" | sha256sum | cut -c1-16)
	echo "export NVMAI_CUDA_LIB_DIR=$out NVMAI_GPU=1 NVMAI_CUBIN_CACHE=$out/cache/$key NVMAI_GPU_FIXTURES=${NVMAI_GPU_FIXTURES:-$root/.fixtures}"
}

case "${1:-}" in
build) build ;;
env)
	build
	envs
	;;
test)
	shift
	build
	eval "$(envs)"
	# Fixtures: the git-ignored copy gpu-check.sh keeps (../shared when present).
	if [ -d "$root/../shared/fixtures/dev" ] && [ ! -d "$NVMAI_GPU_FIXTURES/tiny-moe-fused" ]; then
		mkdir -p "$NVMAI_GPU_FIXTURES"
		for f in tiny-moe-fused tiny-moe-perexpert tiny-dense tiny-moe.refs.json tiny-dense.refs.json \
			tiny-qwen38-fused tiny-qwen38-perexpert tiny-qwen38.refs.json; do
			[ -e "$NVMAI_GPU_FIXTURES/$f" ] || cp -r "$root/../shared/fixtures/dev/$f" "$NVMAI_GPU_FIXTURES/"
		done
	fi
	cd "$root"
	# CGO_ENABLED=0 as on GPU machines: the engine dlopens the driver itself.
	CGO_ENABLED=0 go test -count=1 "$@"
	;;
*)
	sed -n '2,21p' "$0"
	exit 2
	;;
esac
