#!/usr/bin/env bash
# The release gate and packer. In order, every step must pass:
#   1. lint gates: scripts/lint.sh (gofmt, go vet, the converter's expert-order probe) and staticcheck
#   2. the full test suite: scripts/test.sh
#   3. a clean build (fresh build cache, CGO_ENABLED=0, -trimpath) of every command for linux/amd64
#      and linux/arm64; NOTICE must be current and name exactly the modules and Go toolchain those
#      binaries link (`go version -m`; regenerate it with `go run ./scripts/internal/notice -w`)
#   4. the golden gate: scripts/demo.sh builds the embedded model's installs into a temporary models
#      directory, then `nvmai-verify golden` checks every declared target (with --models-dir DIR,
#      also over that directory of real installs, which it never writes)
#   5. packing: nvmai-VERSION-linux-ARCH.tar.gz (commands, LICENSE, NOTICE, README.md, docs/) and SHA256SUMS
# Every golden target that was not checked is named at the end and in OUT/not-checked.txt.
# --publish additionally requires a clean work tree, the tag VERSION at HEAD, and --notes FILE that
# names every target not checked; it then creates the GitHub release with gh.
# --check-notes FILE only checks release notes against the last run's OUT/not-checked.txt.
# --skip-tests REASON skips step 2 for a rehearsal (refused with --publish; the reason is printed).
#
# usage: scripts/release.sh [--version V] [--out DIR] [--models-dir DIR] [--skip-tests REASON]
#                           [--publish --notes FILE]
#        scripts/release.sh [--out DIR] --check-notes FILE
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it
export PATH="/usr/local/go/bin:$PATH"
gopath_bin="$(go env GOPATH)/bin" # where go install puts staticcheck
export PATH="$gopath_bin:$PATH"

# staticcheck's newest release that builds with go1.26.
STATICCHECK_VERSION=v0.8.2
ARCHES=(amd64 arm64)

version="" out="out/release" models_dir="" publish=0 notes="" check_only=0 skip_tests=""
die() { echo "release: $*" >&2; exit 1; }
# check_notes NOTES LIST: every target named in LIST (one a line) must appear in NOTES.
check_notes() {
  local missing
  missing=$(while read -r target; do grep -Fqw -- "$target" "$1" || echo "$target"; done <"$2")
  [ -z "$missing" ] || die "release notes $1 do not name these golden targets that were not checked: $(tr '\n' ' ' <<<"$missing")"
  echo "release notes $1 name every target not checked ($(wc -l <"$2"))"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version=${2:?--version needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --models-dir) models_dir=${2:?--models-dir needs a directory}; shift 2 ;;
    --notes) notes=${2:?--notes needs a file}; shift 2 ;;
    --publish) publish=1; shift ;;
    --check-notes) notes=${2:?--check-notes needs a file}; check_only=1; shift 2 ;;
    --skip-tests) skip_tests=${2:?--skip-tests needs a reason}; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "release: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$check_only" = 1 ]; then
  [ -s "$notes" ] || die "release notes $notes are missing or empty"
  [ -f "$out/not-checked.txt" ] || die "$out/not-checked.txt is missing: run scripts/release.sh first"
  check_notes "$notes" "$out/not-checked.txt"
  exit 0
fi
[ -n "$version" ] || version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)

echo "== preconditions"
for f in LICENSE NOTICE README.md benchmark/golden/targets.json; do
  [ -s "$f" ] || die "$f is missing or empty; a release ships it (LICENSE, NOTICE) or needs it (targets)"
done
go run ./scripts/internal/notice -check ||
  die "NOTICE is stale: run go run ./scripts/internal/notice -w, review and commit it"
if [ "$publish" = 1 ]; then
  [ -n "$notes" ] || die "--publish needs --notes FILE (release notes that name every target not checked)"
  [ -s "$notes" ] || die "release notes $notes are missing or empty"
  [ -z "$(git status --porcelain)" ] || die "the work tree is not clean; publish only a committed state"
  [ "$(git rev-parse -q --verify "refs/tags/$version^{commit}" 2>/dev/null)" = "$commit" ] ||
    die "tag $version does not exist or is not HEAD; tag the release commit first"
  command -v gh >/dev/null || die "gh (the GitHub CLI) is not installed; it publishes the release"
  [ -z "$skip_tests" ] || die "--publish runs every gate; drop --skip-tests"
fi
if [ -n "$models_dir" ] && [ ! -d "$models_dir" ]; then die "--models-dir $models_dir is not a directory"; fi

work=$(mktemp -d "${TMPDIR:-/tmp}/nvmai-release.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== lint gates"
scripts/lint.sh
if ! command -v staticcheck >/dev/null; then
  echo "installing staticcheck $STATICCHECK_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" || true
fi
if command -v staticcheck >/dev/null; then
  staticcheck ./...
else
  echo "WARNING: staticcheck $STATICCHECK_VERSION could not be installed; its gate was SKIPPED" >&2
fi

echo "== tests"
if [ -n "$skip_tests" ]; then
  echo "WARNING: the test suite was SKIPPED (--skip-tests: $skip_tests); this is a rehearsal, not a release" >&2
else
  scripts/test.sh
fi

echo "== clean build (CGO_ENABLED=0) for ${ARCHES[*]}"
for arch in "${ARCHES[@]}"; do
  mkdir -p "$work/bin-$arch"
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOCACHE="$work/gocache" \
    go build -trimpath -ldflags "-X github.com/nvmai/nvmai/pkg/version.Version=$version -X github.com/nvmai/nvmai/pkg/version.Commit=${commit:0:12}" \
      -o "$work/bin-$arch/" ./cmd/...
  ls "$work/bin-$arch"
done
echo "== NOTICE names what the binaries link"
go run ./scripts/internal/notice -check -bin "$work"/bin-*/* ||
  die "NOTICE is stale: run go run ./scripts/internal/notice -w, review and commit it"

echo "== golden gate"
gate_models="$work/models"
MODELS_DIR="$gate_models" scripts/demo.sh >"$work/demo.log" 2>&1 || { cat "$work/demo.log"; die "scripts/demo.sh failed"; }
: >"$work/not-checked-all"
runs=0
run_gate() { # run_gate MODELS_DIR: the gate must pass; its NOT CHECKED targets are collected
  runs=$((runs + 1))
  echo "-- nvmai-verify golden --models-dir $1"
  bin/nvmai-verify golden --models-dir "$1" --golden-dir benchmark/golden --commit "$commit" | tee "$work/golden-$runs.txt"
  sed -n 's/^NOT CHECKED \([^:]*\):.*/\1/p' "$work/golden-$runs.txt" | sort -u >"$work/not-checked-$runs"
}
run_gate "$gate_models"
[ -z "$models_dir" ] || run_gate "$models_dir"
# A target counts as checked when any run checked it.
cp "$work/not-checked-1" "$work/not-checked"
for ((i = 2; i <= runs; i++)); do
  comm -12 "$work/not-checked" "$work/not-checked-$i" >"$work/nc" && mv "$work/nc" "$work/not-checked"
done

echo "== pack $version"
mkdir -p "$out"
rm -f "$out"/nvmai-*.tar.gz "$out/SHA256SUMS" "$out/not-checked.txt" # only what this script writes
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
for arch in "${ARCHES[@]}"; do
  name="nvmai-$version-linux-$arch"
  mkdir -p "$work/stage/$name/bin"
  cp "$work/bin-$arch/"* "$work/stage/$name/bin/"
  cp LICENSE NOTICE README.md "$work/stage/$name/" && cp -r docs "$work/stage/$name/docs"
  # Reproducible archives: sorted names, fixed owner and times, no gzip timestamp.
  tar -C "$work/stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" |
    gzip -n -9 >"$out/$name.tar.gz"
done
(cd "$out" && sha256sum -- *.tar.gz >SHA256SUMS)
cp "$work/not-checked" "$out/not-checked.txt"
cat "$out/SHA256SUMS"

if [ -s "$out/not-checked.txt" ]; then
  echo "NOT CHECKED golden targets ($(wc -l <"$out/not-checked.txt")): these had no install here; the release notes must name them:"
  sed 's/^/  /' "$out/not-checked.txt"
else
  echo "every golden target was checked"
fi

if [ "$publish" = 1 ]; then
  echo "== publish $version"
  check_notes "$notes" "$out/not-checked.txt"
  gh release create "$version" --title "nvmai $version" --notes-file "$notes" "$out"/*.tar.gz "$out/SHA256SUMS"
fi
echo "release $version: archives in $out"
