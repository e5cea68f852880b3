#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs vet,
# every package's tests (unit, fuzz seeds, integration tests against real
# broker processes and kcat) and franz-go's own integration suite against
# `simtel broker`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
go vet ./...
go test -count=1 -timeout 25m ./...
go test -count=1 -race -short -timeout 15m ./broker/... ./agent/...
scripts/kgo-suite.sh
