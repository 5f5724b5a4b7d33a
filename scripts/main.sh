#!/usr/bin/env bash
# The main job on the embedded defaults: set up, train the allocator on `standard`
# (10 minutes), then a scripted-vs-learned tournament with its table and plots.
#   bash scripts/main.sh            # everything
#   MINUTES=2 bash scripts/main.sh  # a shorter training budget
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_TMPDIR=${RAY_TMPDIR:-/tmp/ray_arena}
RUN=runs/allocator_ppo-standard-s0
.venv/bin/commons-arena train --experiment allocator_ppo --scenario standard --minutes "${MINUTES:-10}" --run-name "$(basename "$RUN")" --out runs
# --allow-changed: each run retrains the checkpoint under the same path; the results store keeps
# the earlier runs' rows and the tables use this run's checkpoint.
.venv/bin/commons-arena tournament --scenarios standard elevated crisis --allow-changed \
  --allocators equal_split proportional fifo edf best_fit max_min_fair drf "learned:$RUN/best" \
  --seeds 20 --out results/tournament
echo
echo "learning curve: $RUN/learning_curve.png"
echo "tournament:     results/tournament/standings.md, scores.md, scores.png, standings.png, win_matrix.png"
