#!/usr/bin/env bash
# The main job on the embedded defaults: set up, train the allocator on `standard`
# (10 minutes), then a scripted-vs-learned tournament with its table and plots.
#   bash scripts/main.sh            # everything
#   MINUTES=2 bash scripts/main.sh  # a shorter training budget
# Every invocation keeps the earlier ones: training writes a new run folder
# (runs/allocator_ppo-standard-s0, then -2, -3, ...; runs/latest points at the newest) and the
# tournament writes into that run's own folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_TMPDIR=${RAY_TMPDIR:-/tmp/ray_arena}
.venv/bin/commons-arena train --experiment allocator_ppo --scenario standard --minutes "${MINUTES:-10}" --out runs
RUN=runs/$(readlink runs/latest)  # the folder this training wrote (a stable name from here on)
.venv/bin/commons-arena tournament --scenarios standard elevated crisis \
  --allocators equal_split proportional fifo edf best_fit max_min_fair drf "learned:$RUN/best" \
  --seeds 20 --out "$RUN/tournament"
echo
echo "learning curve: $RUN/learning_curve.png"
echo "tournament:     $RUN/tournament/standings.md, scores.md, scores.png, standings.png, win_matrix.png"
