#!/usr/bin/env bash
# The main job from its experiment file (experiments/configs/main.toml): set up, train the
# allocator on all three tiers (standard, elevated and crisis mixed per episode; `need`
# corrections to `planner`; the file's iterations, capped at MINUTES, default 10), then a
# scripted-vs-learned tournament (planner included) with its table and plots, and the
# checkpoint's paired comparison with every scripted allocator on held-out seeds.
#   bash scripts/main.sh                # everything
#   MINUTES=2 bash scripts/main.sh      # a shorter cap on the training (iterations stop it first if fewer)
#   SEEDS="0 1 2" bash scripts/main.sh  # three training seeds in turn and the report across them instead
# The cap makes the run depend on the machine's load; for a run another lab can repeat, give the
# file alone: `commons-arena train --config experiments/configs/main.toml` (its iterations, a 60-minute cap).
# Every invocation keeps the earlier ones: training writes a new run folder
# (runs/allocator_mixed-mixed-s0, then -2, -3, ...; runs/latest points at the newest) and the
# tournament and the comparison write into that run's own folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_TMPDIR=${RAY_TMPDIR:-/tmp/ray_arena}
if [ -n "${SEEDS:-}" ]; then
  # shellcheck disable=SC2086  # SEEDS is a list of seeds
  .venv/bin/commons-arena train --config experiments/configs/main.toml --minutes "${MINUTES:-10}" --out runs \
    --train-seeds $SEEDS
  echo "across seeds: the aggregate.md in the newest runs/allocator_mixed-mixed-seeds* folder"
  exit 0
fi
.venv/bin/commons-arena train --config experiments/configs/main.toml --minutes "${MINUTES:-10}" --out runs
RUN=runs/$(readlink runs/latest)  # the folder this training wrote (a stable name from here on)
.venv/bin/commons-arena tournament --scenarios standard elevated crisis \
  --allocators equal_split proportional fifo edf best_fit max_min_fair drf planner "learned:$RUN/best" \
  --seeds 20 --out "$RUN/tournament"
.venv/bin/commons-arena compare-checkpoint "$RUN/best" --seeds 100 --first-seed 7000 --out "$RUN/vs_scripted"
echo
echo "learning curve: $RUN/learning_curve.png"
echo "tournament:     $RUN/tournament/standings.md, scores.md, scores.png, standings.png, win_matrix.png"
echo "vs scripted:    $RUN/vs_scripted/checkpoint_vs_scripted.md (paired, 100 held-out seeds per tier)"
