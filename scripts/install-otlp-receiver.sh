#!/usr/bin/env bash
# Install the test OTLP receiver's one dependency, OpenTelemetry's protocol definitions as
# compiled for JavaScript (@opentelemetry/otlp-transformer, pinned by tests/otlp/package-lock.json),
# into tests/otlp/node_modules. Test-only: the plugin never needs it. Without Node.js or the npm
# registry the telemetry tests that need a receiver say so and skip.
set -euo pipefail
cd "$(dirname "$0")/../tests/otlp"
[ -d node_modules/@opentelemetry/otlp-transformer ] && exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "nccl-watchdog: npm not found: the OTLP receiver tests will be skipped" >&2
  exit 0
fi
echo "nccl-watchdog: installing the test OTLP receiver's protocol definitions (npm ci)"
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null 2>&1 ||
  echo "nccl-watchdog: npm ci failed: the OTLP receiver tests will be skipped" >&2
