#!/usr/bin/env bash
# selftest.sh: builds and runs the CPU emulation's selftest (selftest.cc),
# then compiles the real kernel sources the way the emulated NVRTC does and
# checks that every symbol they need resolves against the runtime.
# Twice: with the x86-64 context switch and with ucontext (the aarch64 path).
# usage: tools/cudaemu/selftest.sh   (from anywhere; needs g++)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mktemp -d /tmp/cudaemu-selftest.XXXXXX)"
trap 'rm -rf "$out"' EXIT

# the flags of the emulated NVRTC (tools/cudaemu/driver.cc)
kflags=(-std=c++17 -O1 -fPIC -ffp-contract=off -fno-strict-aliasing -w -DNVMAI_EMU -D__CUDA_ARCH__=900)

# The real kernels, with the rewrite the driver makes of dynamic shared memory.
dyn='s/extern[[:space:]]+__shared__[[:space:]]+(__align__\([0-9]+\)[[:space:]]+)?([A-Za-z0-9_]+)[[:space:]]+([A-Za-z0-9_]+)\[\];/\2* \3 = (\2*)__emu_dyn_smem;/'
# The kernels are hidden (cudaemu.h); the selftest reaches the ones it runs
# through exported thunks, as the driver reaches all of them through its
# generated launchers.
thunks=""
for k in quantize qgemv qgemm_mma qgemm_mma2 qgemm_mma2_s gdn_rec gdn_rec_pipe gdn_rec_par gdn_rec_reg advance; do
    thunks+="extern \"C\" __attribute__((visibility(\"default\"))) void* __selftest_$k() { return (void*)&$k; }"$'\n'
done
{ sed -E "$dyn" "$root/pkg/gpu/gpukernels/kernels.cu"; printf '%s' "$thunks"; } >"$out/kernels.cc"
{ cat "$root/pkg/gpu/gpukernels/kernels.cu" "$root/pkg/gpu/qwen38gpu/kernels.cu" | sed -E "$dyn"; printf '%s' "$thunks"; } >"$out/kernels_q38.cc"
for k in kernels kernels_q38; do
    g++ "${kflags[@]}" -shared -include "$here/cudaemu.h" -x c++ "$out/$k.cc" -o "$out/$k.so" &
done

status=0
for variant in native ucontext; do
    extra=()
    [ "$variant" = ucontext ] && extra=(-DCUDAEMU_UCONTEXT)
    g++ -std=c++17 -O2 -fPIC -Wall -Wextra -Werror "${extra[@]}" -c "$here/runtime.cc" -o "$out/runtime-$variant.o"
    g++ "${kflags[@]}" -Wall -Wno-unused-function -I"$here" -c "$here/selftest.cc" -o "$out/selftest-$variant.o"
    g++ -rdynamic "$out/selftest-$variant.o" "$out/runtime-$variant.o" -o "$out/selftest-$variant" -ldl -lpthread
done
wait
for variant in native ucontext; do
    echo "== $variant context switch"
    "$out/selftest-$variant" "$out/kernels.so" "$out/kernels_q38.so" || status=1
done
exit $status
