#!/usr/bin/env bash
# The test command: installs/builds cudal2, then runs the test suite (tests needing a GPU skip without one).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
exec "${PYTHON:-python3}" -m pytest -q tests "$@"
