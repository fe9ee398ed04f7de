#!/usr/bin/env bash
# End to end with a real agent CLI: Codex CLI (npm @openai/codex) runs a
# two-round tool loop against `nvmai-run serve --scripted` over
# /v1/responses. The scripted engine (a test build, -tags nvmai_scripted)
# tokenizes with the embedded model's tokenizer and renders with the real
# Qwen3.6 template; it calls Codex's shell tool with a command carrying a
# random marker, then answers with the tool's output. Checked: Codex ran the
# command, sent its output back (the server saw a function_call_output with
# the marker), and printed the final answer.
#
# Opt-in: skipped (exit 0, one line) when npm is absent. Loopback only;
# everything but the npm cache (~/.cache/nvmai-agents) lives in a temp dir
# that is removed at the end. Bounded: every step runs under `timeout`.
#
#   scripts/agents-e2e.sh            # NVMAI_CODEX_VERSION=0.171.0 by default
set -euo pipefail

CODEX_VERSION="${NVMAI_CODEX_VERSION:-0.171.0}"
CACHE="${NVMAI_AGENTS_CACHE:-$HOME/.cache/nvmai-agents}/codex-$CODEX_VERSION"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

if ! command -v npm >/dev/null 2>&1; then
	echo "agents-e2e: SKIP (npm not found; install Node.js and npm to run Codex CLI end to end)"
	exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nvmai-agents-e2e.XXXXXX")"
SERVER_PID=""
cleanup() {
	if [ -n "$SERVER_PID" ]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
	echo "agents-e2e: FAIL: $*" >&2
	for f in server.log codex.out; do
		if [ -f "$WORK/$f" ]; then
			echo "---- $f (last 40 lines)" >&2
			tail -n 40 "$WORK/$f" >&2
		fi
	done
	exit 1
}

echo "== build nvmai-run with the scripted engine (-tags nvmai_scripted)"
(cd "$ROOT" && timeout 600 go build -tags nvmai_scripted -o "$WORK/nvmai-run" ./cmd/nvmai-run) || fail "go build"

CODEX="$CACHE/node_modules/.bin/codex"
if [ ! -x "$CODEX" ]; then
	echo "== install @openai/codex@$CODEX_VERSION into $CACHE"
	mkdir -p "$CACHE"
	timeout 600 npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error "@openai/codex@$CODEX_VERSION" >"$WORK/npm.log" 2>&1 ||
		{ cat "$WORK/npm.log" >&2; fail "npm install @openai/codex@$CODEX_VERSION"; }
fi
timeout 30 "$CODEX" --version || fail "codex --version"

MARKER="nvmai-e2e-$RANDOM$RANDOM"
# Codex 0.171 offers exec_command (unified exec); older and newer builds
# offer shell or shell_command: the script lists each, and the engine calls
# the first one the request offers.
cat >"$WORK/script.json" <<EOF
{
  "model": "nvmai-scripted",
  "rounds": [
    {"reasoning": "The user wants me to run a command. I will run it.",
     "tool_calls": [
       {"name": "exec_command", "arguments": {"cmd": "echo $MARKER", "login": false, "yield_time_ms": 10000}},
       {"name": "shell_command", "arguments": {"command": "echo $MARKER"}},
       {"name": "shell", "arguments": {"command": ["bash", "-lc", "echo $MARKER"]}}
     ]},
    {"reasoning": "The command ran; I report its output.",
     "answer": "The command printed: {{tool_output}}"}
  ]
}
EOF

PORT="${NVMAI_E2E_PORT:-$((20000 + RANDOM % 20000))}"
echo "== start the server on 127.0.0.1:$PORT"
timeout 300 "$WORK/nvmai-run" serve --host 127.0.0.1 --port "$PORT" \
	--model "$ROOT/testdata/tiny-moe-fused" \
	--chat-template "$ROOT/pkg/chattemplate/testdata/models/qwen36/chat_template.jinja" \
	--scripted "$WORK/script.json" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do
	if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
		break
	fi
	kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited"
	sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || fail "the server did not become healthy"

mkdir -p "$WORK/codex-home" "$WORK/project"
cat >"$WORK/codex-home/config.toml" <<EOF
model = "nvmai-scripted"
model_provider = "nvmai"

[model_providers.nvmai]
name = "nvmai"
base_url = "http://127.0.0.1:$PORT/v1"
wire_api = "responses"
EOF

echo "== codex exec (marker $MARKER)"
(cd "$WORK/project" && CODEX_HOME="$WORK/codex-home" timeout 180 "$CODEX" exec \
	--skip-git-repo-check --dangerously-bypass-approvals-and-sandbox \
	"Run the shell command: echo $MARKER and tell me what it printed." \
	</dev/null >"$WORK/codex.out" 2>&1) || fail "codex exec exited with $?"

grep -q "round 2 of 2; tools offered: .*exec_command\|round 2 of 2; tools offered: .*shell" "$WORK/server.log" ||
	fail "the server never saw a second round (Codex did not send the tool result back)"
grep -q "round 2 of 2;.*last tool output: \".*$MARKER" "$WORK/server.log" ||
	fail "the function_call_output Codex sent did not contain $MARKER"
# The answer quotes the whole tool output (Codex prefixes it with a header),
# so the marker is on a later line than "The command printed:".
awk '/The command printed:/ { seen = 1 } seen' "$WORK/codex.out" | grep -q "$MARKER" ||
	fail "codex did not print the final answer with $MARKER"
echo "agents-e2e: PASS codex-cli $CODEX_VERSION ran 'echo $MARKER', sent its output back and printed the answer"
