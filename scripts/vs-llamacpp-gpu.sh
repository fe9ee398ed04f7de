#!/usr/bin/env bash
# nvmai's `--engine gpu` and llama.cpp's CUDA backend timed side by side on one GPU, interleaved.
#
#   scripts/vs-llamacpp-gpu.sh --prepare DIR     # here (Go, npm): what the GPU machine needs, into DIR
#   NVMAI_VS_DIR=DIR scripts/vs-llamacpp-gpu.sh [--steps LIST] [--rounds N] [--background]
#                    [--budget S] [--layers N] [--work W] [--keep]    # on the GPU machine, call after call
#   scripts/vs-llamacpp-gpu.sh --apply OUTDIR    # here: the returned runs.jsonl → docs/gpu.md, README.md
#   scripts/vs-llamacpp-gpu.sh --selftest        # here, no GPU: parsing, table, apply, the steps on stubs
#
# --prepare DIR (default out/vs-llamacpp-gpu, git-ignored: carry it to the GPU machine) fetches
# node-llama-cpp 3.22.1 with npm (cached in ~/.cache/nvmai-llamacpp-gpu), clones the llama.cpp
# release its llama/gitRelease.bundle holds, and packs the part llama-bench's CUDA build needs
# (no other GPU backend, no web UI, tools/CMakeLists.txt cut to llama-bench) as llama-src.tar.xz;
# it builds nvmai-run, nvmai-convert, ggufsynth and gpucompare (CGO_ENABLED=0, stripped) into
# bin.tar.xz, and notes nvmai's commit and llama.cpp's version. The GPU machine has no network,
# no Go and no bc: everything it runs comes from DIR.
#
# On the GPU machine the work is resumable steps, state kept in --work (default
# /tmp/nvmai-vs-llamacpp-gpu, kept while the machine stays warm between calls); each call does the
# pending steps of --steps (default all: build,models4,bench4,models8,bench8) in order, skips
# those done, stops a step that does not fit in what is left of --budget (default 540 s) saying so,
# and is called again until it prints "all steps done":
#   build     llama-bench with the CUDA backend for this card's compute capability (-j nproc), in
#             its own session; with --background the call goes on to the next steps meanwhile.
#   modelsN   the GGUF (ggufsynth: Q4_0 with token_embd and output at Q8_0, or Q8_0 throughout) and
#             the nvmai install (nvmai-convert synth) of --layers layers (default 40), written in
#             parallel in the background. models8 first deletes the 4-bit pair this script made:
#             the 8-bit pair (69 GiB at 40 layers) does not fit a 64 GiB disk beside it, and not
#             alone either, so its GGUF goes to /dev/shm when the disk is short; where neither
#             holds it, fewer layers (a multiple of 4), which the output and the table say plainly.
#   benchN    --rounds rounds (default 2), nvmai first in odd rounds, llama.cpp first in even ones,
#             nothing else running: `nvmai-run bench --engine gpu --tokens 128 --prompt-tokens P`
#             for P = 512, 4096, 16384 (prefill P, then decode after P), and
#             `llama-bench -ngl 99 -fa 0,1 -r 3` for prefill (-p 512,4096 -n 0) and decode after
#             512 and 16,384 tokens (-p 0 -n 128 -d 512,16384; the depth's prefill is not timed).
#             Each round's records go to runs.jsonl in --work; the table is printed after each round.
# Medians and ranges are over every sample (nvmai: its three prompts; llama-bench: its repeats,
# whose first is slow); the HBM bound is weight bytes per decode step (nvmai's report; the GGUF's
# header for llama.cpp: every tensor, 8/256 of the routed experts, one token_embd row) ÷ the
# device-to-device copy rate nvmai-run bench measures in the same call.
# Where $OUT is set, each call ends by copying runs.jsonl, table.md and the logs there. Should the
# machine go back between calls (the work directory is lost), copy the runs.jsonl a call returned
# to DIR/earlier-runs.jsonl and ask for the steps left (e.g. --steps build,models8,bench8).
# --keep keeps the 8-bit pair after bench8 (the 4-bit pair is always deleted before models8).
# NVMAI_VS_PREFILL (default 512,4096), NVMAI_VS_DEPTHS (512,16384) and NVMAI_VS_GEN (128) change
# what is timed, e.g. for a shorter call.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

NLC_VERSION=3.22.1
# What is timed; NVMAI_VS_PREFILL, NVMAI_VS_DEPTHS (comma-separated) and NVMAI_VS_GEN change it for
# a shorter device call or a CPU-only trial run.
IFS=, read -ra PREFILL <<<"${NVMAI_VS_PREFILL:-512,4096}"   # prefill lengths: llama-bench -p, nvmai --prompt-tokens
IFS=, read -ra DEPTHS <<<"${NVMAI_VS_DEPTHS:-512,16384}"    # decode after this many tokens of context
GEN=${NVMAI_VS_GEN:-128}                                # decode tokens in both engines
work=${NVMAI_VS_WORK:-/tmp/nvmai-vs-llamacpp-gpu}
steps=all rounds=2 background=0 budget=${BUDGET:-540} layers=40 keep=0 mode=device arg=""
die() { echo "vs-llamacpp-gpu: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case "$1" in
	--prepare) mode=prepare arg=${2:-out/vs-llamacpp-gpu}; shift; [ $# -gt 0 ] && shift ;;
	--apply) mode=apply arg=${2:?--apply needs the directory the device call returned}; shift 2 ;;
	--selftest) mode=selftest; shift ;;
	--steps) steps=${2:?}; shift 2 ;;
	--rounds) rounds=${2:?}; shift 2 ;;
	--budget) budget=${2:?}; shift 2 ;;
	--layers) layers=${2:?}; shift 2 ;;
	--work) work=${2:?}; shift 2 ;;
	--background) background=1; shift ;;
	--keep) keep=1; shift ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
for n in "$rounds" "$budget" "$layers" "$GEN" "${PREFILL[@]}" "${DEPTHS[@]}"; do
	[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || die "--rounds, --budget, --layers and NVMAI_VS_PREFILL/DEPTHS/GEN take whole numbers ≥ 1, got '$n'"
done
# Every fourth layer is full attention: fewer than 4 leave llama.cpp a KV cache of no layers (it aborts).
[ "$layers" -ge 4 ] && [ "$layers" -le 40 ] || die "--layers must be 4..40"
[ "$steps" = all ] && steps=build,models4,bench4,models8,bench8
for s in ${steps//,/ }; do
	case $s in build | models4 | bench4 | models8 | bench8) ;; *) die "unknown step $s (build, models4, bench4, models8, bench8)" ;; esac
done

# ---------------------------------------------------------------------------------------------
# --prepare: on a machine with Go, npm and network.
prepare() {
	local dir=$1 cache=${NVMAI_LLAMACPP_GPU_CACHE:-$HOME/.cache/nvmai-llamacpp-gpu}
	for t in go npm git xz tar; do command -v $t >/dev/null || die "--prepare needs $t"; done
	if [ -e "$dir" ] && [ ! -f "$dir/vs-llamacpp-gpu.prepared" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
		die "$dir exists and was not made by --prepare: name an empty or new directory"
	fi
	mkdir -p "$cache" "$(dirname "$dir")"
	local tgz=$cache/node-llama-cpp-$NLC_VERSION.tgz
	if [ ! -s "$tgz" ]; then
		echo "== npm pack node-llama-cpp@$NLC_VERSION into $cache"
		(cd "$cache" && npm pack --silent "node-llama-cpp@$NLC_VERSION" >/dev/null) || die "npm pack node-llama-cpp@$NLC_VERSION failed"
		[ -s "$tgz" ] || die "npm pack did not write $tgz"
	fi
	local stage
	stage=$(mktemp -d "$(dirname "$dir")/.vs-llamacpp-gpu.XXXXXX")
	trap 'rm -rf "$stage"' RETURN
	echo "== llama.cpp from node-llama-cpp $NLC_VERSION's llama/gitRelease.bundle"
	tar xzf "$tgz" -C "$stage" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json || die "$tgz has no llama/gitRelease.bundle"
	git clone -q "$stage/package/llama/gitRelease.bundle" "$stage/llama.cpp" 2>/dev/null || die "cloning the bundle of $tgz failed"
	local tag head
	tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$stage/package/llama/llama.cpp.info.json")
	head=$(git -C "$stage/llama.cpp" rev-parse --short=10 HEAD)
	mkdir -p "$stage/src" "$stage/out" "$stage/bin"
	git -C "$stage/llama.cpp" archive HEAD CMakeLists.txt cmake ggml src include common tools vendor LICENSE | tar x -C "$stage/src" ||
		die "the llama.cpp release lacks a path the CUDA build needs"
	rm -rf "$stage"/src/ggml/src/ggml-{vulkan,sycl,metal,cann,opencl,musa,hip,webgpu} "$stage"/src/tools/server/public*
	# The tree lacks tools/mtmd and app/: build llama-bench only.
	printf '%s\n' "# cut by scripts/vs-llamacpp-gpu.sh --prepare: llama-bench only" \
		"find_package(Threads REQUIRED)" "llama_add_compile_flags()" "add_subdirectory(llama-bench)" >"$stage/src/tools/CMakeLists.txt"
	tar cJf "$stage/out/llama-src.tar.xz" -C "$stage/src" . || die "packing the llama.cpp source failed"
	echo "${tag:-?} ($head, node-llama-cpp $NLC_VERSION's bundle)" >"$stage/out/llama-version.txt"
	echo "== build nvmai-run, nvmai-convert, ggufsynth, gpucompare (CGO_ENABLED=0, stripped)"
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$stage/bin/" ./cmd/nvmai-run ./cmd/nvmai-convert \
		./scripts/internal/ggufsynth ./scripts/internal/gpucompare || die "go build failed"
	tar cJf "$stage/out/bin.tar.xz" -C "$stage/bin" . || die "packing the binaries failed"
	local commit
	commit=$(git rev-parse --short=10 HEAD 2>/dev/null || echo unknown)
	[ -n "$(git status --porcelain -- cmd pkg internal go.mod go.sum 2>/dev/null)" ] && commit="$commit+local changes"
	echo "$commit" >"$stage/out/commit.txt"
	touch "$stage/out/vs-llamacpp-gpu.prepared"
	# Replace only a directory this script made.
	rm -rf "$dir"
	mv "$stage/out" "$dir"
	ls -l "$dir"
	local kib
	kib=$(du -sk "$dir" | cut -f1)
	echo "$dir: $((kib / 1024)) MiB (nvmai $commit; $(cat "$dir/llama-version.txt"))"
	[ "$kib" -le $((45 * 1024)) ] || die "$dir is over 45 MiB: too big to travel with each device call"
	echo "carry it: run(carry=[\"$dir\"], command=\"NVMAI_VS_DIR=$dir scripts/vs-llamacpp-gpu.sh --background\")"
}

# --apply OUTDIR: the newest runs.jsonl under OUTDIR into docs/gpu.md and README.md.
apply_out() {
	local runs
	runs=$(find "$1" -name runs.jsonl -type f -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -1 | cut -d' ' -f2-)
	[ -n "$runs" ] || die "no runs.jsonl under $1 (the device call copies it to \$OUT)"
	echo "== $runs ($(wc -l <"$runs") records)"
	go run ./scripts/internal/gpucompare table "$runs" || exit 1
	go run ./scripts/internal/gpucompare apply "$runs" docs/gpu.md README.md || exit 1
}

case $mode in
prepare) prepare "$arg"; exit ;;
apply) apply_out "$arg"; exit ;;
selftest) exec bash scripts/internal/gpucompare/selftest.sh ;;
esac

# ---------------------------------------------------------------------------------------------
# On the GPU machine.
t0=$(date +%s)
deadline=$((t0 + budget))
left() { echo $((deadline - $(date +%s))); }
stamp() { echo "[$(date -u +%H:%M:%S) +$(($(date +%s) - t0))s, $(left)s left] $*"; }
P=${NVMAI_VS_DIR:-}
[ -n "$P" ] || die "set NVMAI_VS_DIR to the directory --prepare made (carried to this machine)"
P=$(cd "$P" 2>/dev/null && pwd) || die "NVMAI_VS_DIR=$NVMAI_VS_DIR is not a directory"
for f in bin.tar.xz llama-src.tar.xz commit.txt llama-version.txt; do
	[ -f "$P/$f" ] || die "$P/$f is missing: run scripts/vs-llamacpp-gpu.sh --prepare $NVMAI_VS_DIR and carry it"
done
W=$work
mkdir -p "$W/jobs" "$W/res" "$W/logs" || die "cannot make $W"
runs=$W/runs.jsonl
# A machine that went back between calls loses the work directory: the runs.jsonl an earlier call
# returned, copied into DIR as earlier-runs.jsonl, starts this one's (then ask only for the steps left).
if [ ! -s "$runs" ] && [ -s "$P/earlier-runs.jsonl" ]; then
	cp "$P/earlier-runs.jsonl" "$runs"
	echo "runs.jsonl starts from $P/earlier-runs.jsonl ($(grep -c . "$runs") records)"
fi
touch "$runs"
done_() { [ -f "$W/done.$1" ]; }
mark() { touch "$W/done.$1"; }

finish() {
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT"
		cp "$runs" "$OUT/runs.jsonl"
		[ -s "$runs" ] && "$W/bin/gpucompare" table "$runs" >"$OUT/table.md" 2>/dev/null
		tar czf "$OUT/vs-llamacpp-gpu-logs.tgz" -C "$W" logs res jobs 2>/dev/null
	fi
	stamp "end of call; done: $(cd "$W" && ls done.* 2>/dev/null | sed 's/^done\.//' | tr '\n' ' ')"
}
trap finish EXIT

read -r card driver cc < <(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -1 |
	awk -F', *' '{ gsub(/ /, "_", $1); print $1, $2, $3 }')
card=${card//_/ }
[ -n "$card" ] || die "nvidia-smi names no GPU"
stamp "$card, driver $driver, compute capability $cc; $(nproc) CPUs; work $W"
df -h "$W" /dev/shm 2>/dev/null | tail -n +2

# The binaries, unpacked again when DIR brings others.
sum=$(cksum <"$P/bin.tar.xz")
if [ "$(cat "$W/bin/.cksum" 2>/dev/null)" != "$sum" ]; then
	rm -rf "$W/bin" && mkdir -p "$W/bin" && tar xJf "$P/bin.tar.xz" -C "$W/bin" || die "unpacking $P/bin.tar.xz failed"
	echo "$sum" >"$W/bin/.cksum"
fi
B=$W/bin
commit=$(cat "$P/commit.txt")
llama_version=$(cat "$P/llama-version.txt")
export NVMAI_CUBIN_CACHE=${NVMAI_CUBIN_CACHE:-$W/cubin}

# Background jobs, each in its own session so it outlives the call: NAME's exit status lands in
# jobs/NAME.rc, its output in logs/NAME.log.
job_start() { # NAME CMD...
	local name=$1
	shift
	rm -f "$W/jobs/$name.rc"
	setsid nohup bash -c 'rc=$1; shift; "$@"; echo $? >"$rc"' _ "$W/jobs/$name.rc" "$@" >"$W/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$W/jobs/$name.pid"
}
job_state() { # NAME → none, running, done, failed, died
	local name=$1
	if [ -f "$W/jobs/$name.rc" ]; then
		[ "$(cat "$W/jobs/$name.rc")" = 0 ] && echo done || echo failed
	elif [ -f "$W/jobs/$name.pid" ]; then
		kill -0 "$(cat "$W/jobs/$name.pid")" 2>/dev/null && echo running || echo died
	else
		echo none
	fi
}
job_wait() { # NAME RESERVE: waits while NAME runs and more than RESERVE seconds are left
	while [ "$(job_state "$1")" = running ] && [ "$(left)" -gt "$2" ]; do sleep 3; done
	job_state "$1"
}
any_running() {
	local f
	for f in "$W"/jobs/*.pid; do
		[ -e "$f" ] && [ "$(job_state "$(basename "$f" .pid)")" = running ] && return 0
	done
	return 1
}

# ---- build
LB=$W/llama/build/bin/llama-bench
step_build() {
	done_ build && return 0
	local st
	st=$(job_state build)
	if [ "$st" = none ] || [ "$st" = died ]; then
		[ "$st" = died ] && stamp "build: the earlier build died (the machine changed or it was killed): starting over"
		export PATH="$PATH:/usr/local/cuda/bin" # where the CUDA toolkit puts nvcc when PATH lacks it
		command -v cmake >/dev/null && command -v nvcc >/dev/null || {
			stamp "build: FAILED: cmake and nvcc are needed on this machine"
			echo "cmake or nvcc missing" >"$W/build.failed"
			mark build
			return 0
		}
		rm -rf "$W/llama" && mkdir -p "$W/llama" && tar xJf "$P/llama-src.tar.xz" -C "$W/llama" || die "unpacking llama-src.tar.xz failed"
		local arch=${cc//./} gen=""
		command -v ninja >/dev/null && gen="-G Ninja"
		cat >"$W/llama/build.sh" <<EOF
set -e
export PATH="$PATH"
cd "$W/llama"
cmake -B build $gen -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${arch:-90} \\
  -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \\
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
cmake --build build --target llama-bench -j$(nproc)
EOF
		job_start build bash "$W/llama/build.sh"
		stamp "build: llama-bench (CUDA, sm_${arch:-90}, -j$(nproc)) started in the background (logs/build.log)"
	fi
	if [ "$background" = 1 ] && [ "$(job_state build)" = running ]; then
		stamp "build: running in the background; the next steps go on meanwhile"
		return 0
	fi
	finish_build 30
}
finish_build() { # RESERVE
	local st
	st=$(job_wait build "$1")
	case $st in
	done)
		if [ -x "$LB" ]; then
			stamp "build: llama-bench built ($llama_version)"
			rm -f "$W/build.failed"
		else
			echo "the build ended without $LB" >"$W/build.failed"
		fi
		mark build ;;
	failed)
		stamp "build: FAILED (logs/build.log):"
		grep -m5 -B2 -A6 -iE 'error|fatal' "$W/logs/build.log" | head -40
		tail -5 "$W/logs/build.log"
		echo "the llama-bench build failed (logs/build.log)" >"$W/build.failed"
		mark build ;;
	running)
		stamp "build: still running; call again"
		return 1 ;;
	*)
		stamp "build: not started (the build step was not run in this work directory)"
		return 1 ;;
	esac
	return 0
}

# ---- models
# Sizes from the writers' dry runs, in bytes.
gguf_size() { "$B/ggufsynth" --dry-run --layers "$1" --type "$2" --embd-type q8_0 --output-type q8_0 --output /dev/null 2>&1 | grep -o 'file [0-9]* B' | tr -dc 0-9; }
nv_size() { "$B/nvmai-convert" synth --geometry qwen3.5-35b-a3b --bits "$1" --layers "$2" --dry-run -o "$W/dry" 2>&1 | grep -o '([0-9]* bytes)' | tr -dc 0-9; }
avail() { df -B1 --output=avail "$1" 2>/dev/null | tail -1 | tr -dc 0-9; }

step_models() { # WIDTH
	local w=$1 t=q4_0
	[ "$w" = 8 ] && t=q8_0
	done_ "models$w" && return 0
	if [ ! -f "$W/m$w.env" ]; then
		if [ "$w" = 8 ]; then remove_pair 4; fi
		local n=$layers gg nv need_g need_n root shm margin=$((2 << 30)) where="" note=""
		# NVMAI_VS_DISK_FREE / NVMAI_VS_SHM_FREE (bytes) stand in for df in the selftest.
		root=${NVMAI_VS_DISK_FREE:-$(avail "$W")}
		shm=${NVMAI_VS_SHM_FREE:-$(avail /dev/shm)}
		shm=${shm:-0}
		while [ "$n" -ge 1 ]; do
			need_g=$(gguf_size "$n" $t)
			need_n=$(nv_size "$w" "$n")
			[ -n "$need_g" ] && [ -n "$need_n" ] || die "models$w: the dry runs of ggufsynth / nvmai-convert gave no size"
			if [ $((need_g + need_n + margin)) -le "$root" ]; then where=disk; break; fi
			if [ $((need_n + margin)) -le "$root" ] && [ $((need_g + margin)) -le "$shm" ]; then where=shm; break; fi
			[ "$n" -le 4 ] && { n=0; break; }
			n=$(((n - 1) / 4 * 4))
		done
		[ "$n" -ge 1 ] || die "models$w: even 4 layers do not fit: $((root >> 30)) GiB free on $W's disk, $((shm >> 30)) GiB in /dev/shm"
		nv=$W/m$w/nvmai-l$n-${w}bit
		gg=$W/m$w/llama-l$n-$t-q8_0-q8_0.gguf
		if [ "$where" = shm ]; then
			gg=/dev/shm/nvmai-vs-llamacpp-gpu/llama-l$n-$t-q8_0-q8_0.gguf
			stamp "models$w: the GGUF goes to /dev/shm ($((need_g >> 30)) GiB): $((root >> 30)) GiB free on the disk hold the nvmai install ($((need_n >> 30)) GiB) but not both"
		fi
		if [ "$n" != "$layers" ]; then
			note="$n layers, not $layers: the $layers-layer pair does not fit this machine ($((root >> 30)) GiB free on the disk, $((shm >> 30)) GiB in /dev/shm); the figures are for the $n-layer models, not scaled."
			stamp "models$w: NOTE: $note"
		fi
		mkdir -p "$(dirname "$nv")" "$(dirname "$gg")"
		printf 'n=%q\nnv=%q\ngg=%q\nnote=%q\n' "$n" "$nv" "$gg" "$note" >"$W/m$w.env"
		printf '%s\n' "$nv" "$gg" >"$W/made.$w"
		job_start "gguf$w" nice -n 5 "$B/ggufsynth" --output "$gg" --layers "$n" --type $t --embd-type q8_0 --output-type q8_0 --threads "$(nproc)" --overwrite
		job_start "nv$w" nice -n 5 "$B/nvmai-convert" synth --geometry qwen3.5-35b-a3b --bits "$w" --layers "$n" --quiet --overwrite -o "$nv"
		stamp "models$w: writing the $n-layer GGUF ($t) and nvmai install ($w-bit) in the background"
	fi
	# shellcheck disable=SC1090
	. "$W/m$w.env"
	local j st
	for j in "gguf$w" "nv$w"; do
		st=$(job_wait "$j" 20)
		case $st in
		done) ;;
		running) stamp "models$w: $j still writing; call again"; return 1 ;;
		*)
			stamp "models$w: $j $st (logs/$j.log):"
			tail -5 "$W/logs/$j.log"
			rm -f "$W/m$w.env" # the next call starts the pair over
			return 1 ;;
		esac
	done
	local bytes
	bytes=$("$B/gpucompare" gguf-bytes "$gg") || return 1
	echo "$bytes" >"$W/m$w.bytes"
	stamp "models$w: done ($(du -sh "$nv" | cut -f1) nvmai, $(du -sh "$gg" | cut -f1) GGUF; llama.cpp reads $((bytes >> 20)) MiB of weights per decode step)"
	mark "models$w"
}

remove_pair() { # WIDTH: deletes the pair this script made for WIDTH (paths listed in made.WIDTH)
	[ -f "$W/made.$1" ] || return 0
	local p
	while read -r p; do
		case $p in "$W"/* | /dev/shm/nvmai-vs-llamacpp-gpu/*) rm -rf -- "$p" ;; esac
	done <"$W/made.$1"
	rm -f "$W/made.$1"
	touch "$W/removed.$1"
	stamp "deleted the $1-bit pair this script made (bench$1 cannot run again in this work directory)"
}

# ---- bench
# limit: seconds a run may take, what is left of the budget less a margin (timeout 0 would mean none).
limit() { local t=$(($(left) - 5)); [ "$t" -ge 1 ] || t=1; echo "$t"; }
nv_run() { # WIDTH ROUND PROMPT META... → records on stdout
	local w=$1 r=$2 p=$3 out=$W/res/nv-$1bit-r$2-p$3
	shift 3
	local rc=0
	timeout "$(limit)" "$B/nvmai-run" bench --engine gpu -m "$nv" --prompt-tokens "$p" --tokens "$GEN" --skip-bandwidth --quiet --json \
		>"$out.json" 2>"$out.err" || rc=$?
	if [ "$rc" = 0 ] && "$B/gpucompare" nvmai "$@" "$out.json" 2>>"$out.err"; then return 0; fi
	local why="exit $rc: $(grep . "$out.err" | tail -1 | cut -c1-120)"
	[ "$rc" = 124 ] && why="timed out (the call's budget)"
	"$B/gpucompare" failed "$@" --engine nvmai --test prefill --tokens "$p" --why "$why"
	"$B/gpucompare" failed "$@" --engine nvmai --test decode --tokens "$GEN" --depth "$p" --why "$why"
}
ll_run() { # WIDTH ROUND KIND(prefill|decode) META... → records on stdout
	local w=$1 r=$2 kind=$3 out=$W/res/ll-$1bit-r$2-$3
	shift 3
	local args=(-p "$(IFS=,; echo "${PREFILL[*]}")" -n 0) p rc=0
	[ "$kind" = decode ] && args=(-p 0 -n "$GEN" -d "$(IFS=,; echo "${DEPTHS[*]}")")
	if [ -f "$W/build.failed" ]; then
		rc=1
		echo "$(cat "$W/build.failed")" >"$out.err"
	else
		timeout "$(limit)" "$LB" -m "$gg" -ngl 99 -fa 0,1 -r 3 "${args[@]}" -o json >"$out.json" 2>"$out.err" || rc=$?
		if [ "$rc" = 0 ] && "$B/gpucompare" llama --weight-bytes "$(cat "$W/m$w.bytes")" "$@" "$out.json" 2>>"$out.err"; then return 0; fi
	fi
	local why="exit $rc: $(grep . "$out.err" | tail -1 | cut -c1-120)"
	[ "$rc" = 124 ] && why="timed out (the call's budget)"
	if [ "$kind" = prefill ]; then
		for p in "${PREFILL[@]}"; do "$B/gpucompare" failed "$@" --engine llama.cpp --test prefill --tokens "$p" --why "$why"; done
	else
		for p in "${DEPTHS[@]}"; do "$B/gpucompare" failed "$@" --engine llama.cpp --test decode --tokens "$GEN" --depth "$p" --why "$why"; done
	fi
}

step_bench() { # WIDTH
	local w=$1
	done_ "bench$w" && return 0
	if [ -f "$W/removed.$w" ]; then
		stamp "bench$w: its models were deleted for the 8-bit pair; skipped"
		return 0
	fi
	done_ "models$w" || { stamp "bench$w: models$w is not done"; return 1; }
	if ! done_ build; then
		[ "$(job_state build)" = running ] && stamp "bench$w: waiting for the llama-bench build"
		finish_build 60 || return 1
	fi
	while any_running && [ "$(left)" -gt 60 ]; do sleep 3; done
	any_running && { stamp "bench$w: background work still running, no clean timing possible; call again"; return 1; }
	# shellcheck disable=SC1090
	. "$W/m$w.env"
	local r first need secs
	for r in $(seq 1 "$rounds"); do
		done_ "bench$w.r$r" && continue
		# A round's time: the last round's here, with a margin; a guess before the first.
		need=$(($(cat "$W/bench$w.secs" 2>/dev/null || echo $((w == 4 ? 180 : 235))) * 11 / 10 + 10))
		if [ "$(left)" -lt "$need" ]; then
			stamp "bench$w: round $r of $rounds skipped for now: $(left) s left, a round takes ~$need s; call again"
			return 1
		fi
		first=nvmai
		[ $((r % 2)) = 0 ] && first=llama.cpp
		local meta=(--card "$card" --driver "$driver" --date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --commit "$commit" --llama "$llama_version"
			--width "$w" --layers "$n" --round "$r" --first "$first" --note "$note")
		stamp "bench$w: round $r of $rounds, $first first"
		local s=$(date +%s) rf=$W/res/round-$w-$r.jsonl
		: >"$rf"
		local nvp=() p
		for p in "${PREFILL[@]}" "${DEPTHS[@]}"; do [[ " ${nvp[*]} " == *" $p "* ]] || nvp+=("$p"); done
		run_nvmai() { for p in "${nvp[@]}"; do nv_run "$w" "$r" "$p" "${meta[@]}" >>"$rf"; done; }
		run_llama() { ll_run "$w" "$r" prefill "${meta[@]}" >>"$rf"; ll_run "$w" "$r" decode "${meta[@]}" >>"$rf"; }
		if [ "$first" = nvmai ]; then run_nvmai; run_llama; else run_llama; run_nvmai; fi
		secs=$(($(date +%s) - s))
		if grep -q '"failed":"timed out' "$rf"; then
			# It takes longer than that: the next call starts it only with a minute more than it had.
			echo $((secs + 60)) >"$W/bench$w.secs"
			stamp "bench$w: round $r ran out of the call's budget after $secs s; it runs again, whole, next call"
			return 1
		fi
		cat "$rf" >>"$runs"
		echo "$secs" >"$W/bench$w.secs"
		mark "bench$w.r$r"
		stamp "bench$w: round $r done in $secs s$(grep -c '"failed"' "$rf" | sed 's/^0$//; s/^\(.\+\)$/, \1 records failed/')"
		"$B/gpucompare" table "$runs"
	done
	mark "bench$w"
	if [ "$w" = 8 ] && [ "$keep" = 0 ]; then remove_pair 8; fi
	return 0
}

all_done=1
for s in ${steps//,/ }; do
	case $s in
	build) step_build || { all_done=0; break; } ;;
	models4) step_models 4 || { all_done=0; break; } ;;
	models8) step_models 8 || { all_done=0; break; } ;;
	bench4) step_bench 4 || { all_done=0; break; } ;;
	bench8) step_bench 8 || { all_done=0; break; } ;;
	esac
done
# A build left in the background must end before this call may say it is done.
if [ "$all_done" = 1 ] && [[ ",$steps," == *,build,* ]] && ! done_ build; then finish_build 20 || all_done=0; fi
if [ "$all_done" = 1 ]; then
	stamp "all steps done ($steps)"
	[ -s "$runs" ] && "$B/gpucompare" table "$runs"
fi
exit 0
