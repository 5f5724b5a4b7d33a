#!/usr/bin/env bash
# The main job on the embedded defaults: set up, train the allocator on all three tiers
# (standard, elevated and crisis mixed per episode; residual corrections to `planner`;
# 10 minutes), then a scripted-vs-learned tournament with its table and plots, and the
# checkpoint's paired comparison with every scripted allocator on held-out seeds.
#   bash scripts/main.sh            # everything
#   MINUTES=2 bash scripts/main.sh  # a shorter training budget
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_TMPDIR=${RAY_TMPDIR:-/tmp/ray_arena}
RUN=runs/allocator_mixed-mixed-s0
.venv/bin/commons-arena train --experiment allocator_mixed --minutes "${MINUTES:-10}" --run-name "$(basename "$RUN")" --out runs
.venv/bin/commons-arena tournament --scenarios standard elevated crisis \
  --allocators equal_split proportional fifo edf best_fit max_min_fair drf planner "learned:$RUN/best" \
  --seeds 20 --out results/tournament
.venv/bin/python -m experiments.bench.checkpoint "$RUN/best" --seeds 30 --first-seed 7000 --out results/checkpoint
echo
echo "learning curve: $RUN/learning_curve.png"
echo "tournament:     results/tournament/standings.md, evaluation.md, scores.png, standings.png"
echo "vs scripted:    results/checkpoint/checkpoint_vs_scripted.md (paired, 30 held-out seeds per tier)"
