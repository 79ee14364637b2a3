#!/usr/bin/env bash
# The pinned Node tools of tests/conformance (package-lock.json): the conformance suites, a Node >= 22 binary, the
# official TypeScript SDK 1.x and its 2026 client (@modelcontextprotocol/client), used by run.sh and by the pytest
# suite's door and reverse-bridge tests (tests/gateway/ts_sdk.py, tests/gateway/http/test_reverse_ts.py).
# npm ci once per lock-file content: the stamp makes a second run a no-op.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
STAMP="$HERE/node_modules/.installed-lock-sha256"
want="$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  echo "conformance: npm ci (pinned suites, TypeScript SDK and Node binary)"
  # The system Node (v20) only runs npm here; it warns that the suites want Node >= 22, which this installs.
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" > "$STAMP"
fi
