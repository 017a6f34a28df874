#!/usr/bin/env bash
# The test command: installs/builds cudal2 with the test dependencies (pytest, hypothesis, and openai and ray for the
# search's LLM proposer and Ray backend), then runs the test suite (tests needing a GPU skip without one).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh --test
exec "${PYTHON:-python3}" -m pytest -q tests "$@"
