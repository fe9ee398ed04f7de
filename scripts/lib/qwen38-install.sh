# Sourced by the qwen38 benchmark scripts (bench-qwen38.sh, kv-bench-qwen38.sh), from the
# repository root, after they set work, layers and model.
#
# qwen38_install WORKDIR_NAME NICE: builds nvmai-run and nvmai-convert into $work/bin and, unless
# $model already holds an install, writes there the synthetic Qwen3.8-Flash-Next 125B-A6B install
# (4-bit, $layers layers) at nice level NICE; an install it wrote is removed on exit unless KEEP=1.
# WORKDIR_NAME is how the calling script's usage names its work directory, for the error when
# $model exists but is no install.
qwen38_install() {
  mkdir -p "$work/bin"
  go build -o "$work/bin/" ./cmd/nvmai-run ./cmd/nvmai-convert
  created=0
  if [ ! -f "$model/manifest.json" ]; then
    if [ -e "$model" ]; then echo "$model exists but is no install; remove it or choose another $1" >&2; exit 1; fi
    echo "== writing $model (synthetic qwen3.8-flash-next-125b-a6b, 4-bit, $layers layers)" >&2
    nice -n "$2" "$work/bin/nvmai-convert" synth --geometry qwen3.8-flash-next-125b-a6b --bits 4 --layers "$layers" \
      --output "$model" --quiet
    created=1
  fi
  trap qwen38_cleanup EXIT
}

qwen38_cleanup() { if [ "$created" = 1 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$model"; fi; }
