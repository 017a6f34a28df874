#!/usr/bin/env bash
# A lent GPU machine takes the working tree in one transfer of at most 64 MiB, and the tracked results alone approach
# it. Before a call, `scripts/device_slim.sh out` removes from the working tree the tracked results that no GPU stage
# reads (plots, reports, benchmark runs, logs); after the call `scripts/device_slim.sh back` restores them from git.
# Kept: what the stages read - the sanitizer reports (the gate), the sweeps (warm starts, tuning candidates), the
# search stores (resumed) and the tunings (the table's sources). Prints the bytes the tracked tree then holds.
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=benchmarks/results
needed() {  # needed PATH: whether a GPU stage reads the tracked results file PATH
  case ${1##*/} in
    *sanitize*.json | sweep*.json.gz | *.sqlite.gz | tune_grid*.json.gz) return 0 ;;
    *) return 1 ;;
  esac
}
case ${1:-} in
  out)
    git ls-files -z -- "$RESULTS" | while IFS= read -r -d '' path; do
      needed "$path" || rm -f -- "$path"
    done ;;
  back) git checkout -- "$RESULTS" ;;
  *) echo "usage: scripts/device_slim.sh out|back" >&2; exit 2 ;;
esac
{ git ls-files -z | xargs -0 du -cb 2>/dev/null || true; } | tail -n 1 | sed 's/total/bytes in the tracked files present/'  # (du: the removed ones are missing)
