"""The arguments of ``commons-arena train``: one field per flag, each with its help text.

Light on purpose: the CLI imports this module at start-up, so it imports no RLlib, Ray or
torch (``tests/experiments/training/test_training_setup.py`` checks). What the arguments mean for a run (the
scenarios parsed, the learning seats, the background, codecs, scales) is resolved once by
:func:`experiments.training.setup.resolve`.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, get_args, get_origin

import tyro

from commons_arena.batched.env import MAX_NUM_ENVS
from experiments.seeds import first_seed
from experiments.training.kind import Kind
from experiments.training.kinds import KINDS, kind_of
from experiments.training.networks import NETWORKS, Network, network_of

LATEST = "latest"  # <out>/latest: a symlink to the newest run folder
if TYPE_CHECKING:
    ExperimentName = str
    NetworkName = str
else:  # tyro's choices and the experiment file's check: the kinds' and networks' names, in one place each
    ExperimentName, NetworkName = Literal[tuple(KINDS)], Literal[tuple(NETWORKS)]

# Upper bounds of the numbers a run takes (docs/limits.md): refused up front, before anything is written.
MAX_TRAIN_SEED = 2**31 - 1  # RLlib seeds numpy's generators (< 2**32) with seed + runner index
SELECTION_ROOM = 4_000  # seeds of the evaluate range (experiments/seeds.py) a search may choose on
MAX_EVAL_SEEDS = 100_000  # held-out episodes of one evaluation or report (the commands' --seeds bound)
MAX_RUNNERS = 256
MAX_ENVS_PER_RUNNER = MAX_NUM_ENVS  # one batch of the batched sampler
MAX_BATCH = 10_000_000
MAX_EPOCHS = 1_000
MAX_HIDDEN = 4_096  # widest layer; at most MAX_LAYERS layers (4 x 65536 would be 12.9 billion weights)
MAX_LAYERS = 8
MAX_TORCH_THREADS = 256
MAX_ITERATIONS = 10_000_000
MAX_MINUTES = 1_000_000.0  # ~2 years
MAX_LR = 10.0  # a step this size already diverges; 1e300 reached torch (after Ray) as inf
MAX_LOGIT_BIAS = 100.0  # --zero-bias, --best-code-bias: at 100 the start is already certain (e^-100 elsewhere)
MAX_ENTROPY_COEFF = 100.0
MAX_FIRST_SEED = 2**63 - 1  # a held-out seed: reset() takes any int >= 0, a results row stores int64
MAX_SPLIT = 100_000  # scenarios of a split (commons_arena.family.MAX_GENERATE; not imported: the CLI starts light)


@dataclass
class TrainArgs:
    experiment: ExperimentName = "allocator_ppo"
    """allocator_ppo: the allocator learns on one scenario; allocator_curriculum: standard ->
    elevated -> crisis; allocator_mixed: each episode one of standard / elevated / crisis; allocator_family: each
    episode one scenario of a family's training split (--split), the shape-free allocator (--network cells);
    seats_ppo: the --learners seats learn; selfplay: allocator, teams and broker all learn
    (one class per kind: experiments/training/kinds.py); league: a team learns against a mix of scripted teams
    and frozen snapshots of itself (experiments/training/league.py); best_response: the one --learners seat (a
    team, or the broker) learns against a frozen --background, then reports against every scripted policy of its
    role on --report-seeds held-out seeds (experiments/evaluation/best_response.py)"""
    learners: tuple[str, ...] = ("allocator",)
    """seats_ppo: the seats that learn: seat ids or roles (allocator, broker, team = every team);
    best_response: the one seat that learns (a team's name, or broker)"""
    team_modules: Literal["shared", "per_team"] = "shared"
    """learning teams share one module (their identity appended to the observation) or get one each"""
    background: Annotated[Path | None, tyro.conf.arg(aliases=("--population",))] = None
    """population file (TOML: [roles] / [agents], policies/population.py) for the seats that do not learn
    (scripted or learned:<dir> frozen checkpoints);
    default: the scenario's own population (--population, as play and serve call it, is the same flag)"""
    mix_background: Path | None = None
    """a second population file (scripted or learned:<dir> entries, the rest each scenario's own population) that
    replaces --background in a --mix-share of training episodes, drawn per episode (e.g. a frozen best
    response in one team seat: the arms race, docs/negotiation.md); held-out evaluations play --background"""
    mix_share: float = 0.5
    """share of training episodes played with --mix-background"""
    mixture: Path | None = None
    """a mixture file (TOML): several backgrounds (rosters, or each scenario's own population) with weights, one
    drawn per training episode instead of --background (experiments/training/mixture.py; the PSRO loop's, docs/
    negotiation.md); held-out evaluations play --background. Not with --mix-background"""
    league_scripted: tuple[str, ...] = ("truthful", "greedy_bluffer")
    """league: the scripted team policies in the mix (beside the learner and its snapshots)"""
    snapshot_margin: float = 0.1
    """league: snapshot the learner when its mean return beats the mix's by this share of |mix|"""
    snapshot_gap: int = 3
    """league: at least this many iterations between snapshots"""
    scenario: str = "standard"
    """scenario for allocator_ppo (ignored by the curriculum)"""
    split: str = "broad-train"
    """allocator_family: the scenario family split its training episodes play (a held-out split is refused)"""
    family_scenarios: tuple[str, ...] = ()
    """allocator_family: scenarios (names or files, e.g. standard elevated crisis) its training episodes play
    beside the split's"""
    family_share: float = 0.0
    """allocator_family: the share of training episodes that play --family-scenarios (0: every scenario of the
    split and of --family-scenarios equally likely)"""
    eval_scenarios: int = 6
    """allocator_family: scenarios of the training split (a fixed draw) its held-out-seed evaluations play;
    the held-out split is for `commons-arena benchmark`, never read by training"""
    validation_scenarios: int = 0
    """allocator_family: hold this many scenarios of the training split out of training (a fixed draw, the same
    for every run: commons_arena.family.hold_out); its held-out-seed evaluations play them instead of
    --eval-scenarios, so `best` (and --patience) are chosen on scenarios it never trained on. 0: none held out"""
    network: NetworkName = "mlp"
    """the allocator's network: mlp (RLlib's MLP over the scenario's own observation: one shape only) or cells
    (policies/universal.py: one MLP shared by every (team, tier) cell, plays any cluster up to 8 teams x 4
    tiers; needs --action-codec need or residual); padded (RLlib's MLP over the same padded view, weights per
    cell slot: the alternative cells was measured against, docs/training.md; writes no learned: files)"""
    cell_features: Literal["v1", "v2"] = "v1"
    """the cell view's features (--network cells or padded; policies/universal.py CELL_VIEWS, recorded in the
    checkpoint): v1 this tick only (every checkpoint before v2, the shipped one included); v2 adds each team's
    memory over the episode: its declarations, the allocator's grants, a revealed team's need against what it
    declared (docs/training.md, "Memory of declarations"). A v1 checkpoint can start a v2 run (--init-from): the
    new inputs' weights start at zero, so the run starts from its policy exactly"""
    critic: Literal["pooled", "cells", "privileged"] = "pooled"
    """the cell network's credit (--network cells, --sampler lean; docs/training.md, "Credit per cell"): pooled, the
    value of the tick, every cell sharing its one advantage; cells, a critic of the cells' joint codes Q(s, a)
    besides it, and each cell's advantage the return minus its own baseline (Q with that cell's code drawn again
    from its policy: Wu et al. 2018's action-dependent factorized baseline); privileged, the same critic also
    reading each cell's hidden state (true need, the jobs still to arrive, the team's policy; the policy never
    sees them). The critics are training-only: the checkpoint holds the policy alone"""
    minutes: float = 10.0
    """wall-clock budget of the whole run: references, Ray start-up, training, evaluations"""
    iterations: int | None = None
    """stop after this many training iterations instead (whichever comes first)"""
    algo: Literal["PPO", "APPO"] = "PPO"
    """RLlib algorithm; the config is algorithm-agnostic"""
    seed: int = 0
    """seeds RLlib, the scripted policies and the observation-scale sampling"""
    num_env_runners: int = 0
    """remote env runners (0 = sample in the driver); cut to the CPUs Ray reports"""
    num_envs_per_env_runner: int = 32
    """vectorised envs per runner: the cheap speed-up on few cores (RLlib's per-step cost is
    per vector step, so more envs amortise it)"""
    train_batch_size: int = 2048
    """env steps per iteration"""
    minibatch_size: int = 256
    """SGD minibatch size"""
    num_epochs: int = 6
    """SGD passes over each batch"""
    lr: float = 5e-4
    """learning rate"""
    gamma: float = 0.99
    """discount (episodes are 10-20 ticks)"""
    gae_lambda: float = 0.9
    """GAE lambda (1.0, RLlib's default, is the Monte-Carlo return minus the value baseline;
    lower leans on the value function: less variance, more bias)"""
    entropy_coeff: float = 0.005
    """entropy bonus"""
    vf_clip: float = math.inf
    """clip of the value function's squared error (RLlib's vf_clip_param). RLlib's default, 10,
    zeroes the value loss's gradient wherever the error exceeds about 3.2 -- nearly everywhere
    at this game's returns (hundreds) -- so the critic never learns and advantages are raw
    returns; off by default"""
    action_codec: Literal["need", "need_fair", "need_impartial", "need_thrifty", "residual", "absolute", "relative",
                          "none"] = "need"
    """how the module's action becomes an env action (policies.codecs): 'need' corrects the
    planner's need estimates (then the planner plans), 'need_fair' fair_planner's (a base that pays
    no bluff in proportion), 'need_impartial' those of fair_planner heeding no escalation, 'need_thrifty' the same
    never buying the headroom, 'residual' corrects the planner's
    grants, 'absolute' chooses every grant, 'relative' grants shares of each team's demand;
    'none' outputs the env action itself"""
    seat_codec: tuple[str, ...] = ()
    """action codecs of learning seats as KEY=CODEC, by seat or role (search=bluff_per_tier team=bluff
    broker=markup; none = raw actions); a learning team or broker named nowhere uses its role's default
    (team: bluff, broker: markup; docs/codecs.md); --action-codec stays the allocator's"""
    zero_bias: float | None = None
    """initial logit advantage of the codec's zero code (residual: play the planner) over every
    other choice of each sub-action; 0 leaves RLlib's initialisation alone. Default 3.0; 0 in
    best_response and 1.0 in selfplay, where at 3.0 the learner never left it (each kind's zero_bias, kinds.py)"""
    best_code_bias: float = 2.0
    """best_response: initial logit advantage of the seat codec's best fixed code, searched on --selection-seeds
    before training (the learner starts from it; the report's final best response is the better of the two on
    those seeds: experiments/evaluation/best_code.py); 0 starts from RLlib's initialisation (--zero-bias applies)"""
    init_from: str | None = None
    """start the learning allocator from a data-only checkpoint's policy (learned:<dir>) instead of its
    codec's zero code: its weights and observation scale; the value function starts fresh. Refused unless
    its codec, history, hidden sizes and spaces are the run's (experiments/training/warm_start.py)"""
    history: int = 1
    """ticks of observation the module sees, stacked newest first (1 = this tick only)"""
    use_lstm: bool = False
    """give the allocator's module an LSTM (RLlib's use_lstm) instead of stacking ticks"""
    scripted_in_env: bool = True
    """play the scripted population inside the env wrapper (faster sampling; a curriculum
    stage brings its own population); --no-scripted-in-env runs each scripted agent as an
    untrained RLlib module instead (allocator_ppo only)"""
    sampler: Literal["stock", "batched", "lean"] = "stock"
    """how env runners sample: 'stock' steps one focal env per sub-env (RLlib's own vector env);
    'batched' steps all of a runner's sub-envs in one call of the batched core, the background and
    the codec batched too (experiments/training/batched_env.py; the allocator-vs-scripted kinds:
    one or mixed scenarios, a scripted background in the env; refused with the reason otherwise);
    'lean' samples the batched core into arrays and trains PPO from them, no episode objects
    (experiments/training/lean.py; what 'batched' plays, PPO only)"""
    overlap: bool = False
    """--sampler lean with remote runners: each samples the next batch while the driver updates (both cores at
    work; the samples lag the weights by one update, which changes PPO slightly: docs/training.md)"""
    hidden: tuple[int, ...] = (256, 256)
    """hidden layer sizes of the allocator's policy and value networks"""
    eval_every: int = 5
    """iterations between held-out evaluations (and checkpoints)"""
    eval_seeds: int = 20
    """held-out episodes per evaluation"""
    eval_first_seed: int = first_seed("training_eval")
    """held-out seeds are eval_first_seed .. + eval_seeds - 1"""
    patience: int = 0
    """stop the run after this many held-out evaluations in a row without a new best score (on the current stage);
    0: never stop early (the budget alone ends the run)"""
    promote_at: float = 0.6
    """curriculum: training episodes' normalised score (smoothed) that promotes to the next stage"""
    promote_after: int = 5
    """curriculum: at least this many iterations on a stage before promotion"""
    report_seeds: int = 100
    """best_response: held-out seeds of the final report (report_first_seed ..); never trained on or used to
    pick the checkpoint"""
    report_first_seed: int = first_seed("best_response_report")
    """best_response: first seed of the final report"""
    selection_seeds: int = 30
    """best_response: seeds (the evaluate range, experiments/seeds.py) on which the codec's best fixed code is chosen before the report plays it"""
    selection_refine: int = 120
    """best_response: the fixed-code search's second look: its 5 best codes play this many more selection seeds, and
    the best over all of them wins; the final choice between the checkpoint and that code plays them too (0: one look)"""
    out: Path = Path("runs")
    """parent folder of the run folder"""
    run_name: str | None = None
    """run folder name (default: experiment-scenario-s<seed>, numbered -2, -3, ... when taken);
    a taken --run-name is refused: runs never share a folder"""
    resume: Path | None = None
    """continue the run in this folder from its last checkpoint (its experiment.toml wins); the only
    way to write into an existing run folder. It restores RLlib's full state, which is pickled: the run
    records the sha256 of its checkpoint's files, and a checkpoint that differs is refused (`learned:` never
    reads those files)"""
    trust_checkpoint: bool = False
    """with --resume: restore a checkpoint whose files differ from the run's record (or an older run's,
    which has none): its pickles run code, so only for a folder you made or trust"""
    address: str | None = None
    """Ray cluster address (default: $RAY_ADDRESS, else a local Ray)"""
    torch_threads: int = 1
    """torch threads in the driver (1 is fastest on 2 cores for these small networks)"""
    quiet: bool = False
    """no per-iteration lines"""

    def validate(self) -> None:
        """Refuse arguments that cannot work on their own (no file is read: the scenarios, the
        learners and the population files are checked when the run is set up, ``setup.resolve``)."""
        literal = [f"--{f.name.replace('_', '-')} must be one of {list(get_args(hint))}, got {value!r:.60}"
                   for f in fields(TrainArgs) for hint in [_HINTS[f.name]] for value in [getattr(self, f.name)]
                   if get_origin(hint) is Literal and value not in get_args(hint)]
        for message in [*literal, *self.kind.problems(self)]:  # a run's record (--resume) is read without tyro too
            raise ValueError(message)
        checks = [
            (math.isfinite(self.minutes) and self.minutes > 0, f"--minutes must be a positive number, got {self.minutes}"),
            (self.iterations is None or self.iterations >= 1, f"--iterations must be at least 1, got {self.iterations}"),
            (self.seed >= 0, f"--seed must be non-negative, got {self.seed}"),
            (self.num_env_runners >= 0, f"--num-env-runners must be 0 or more, got {self.num_env_runners}"),
            (self.num_envs_per_env_runner >= 1, f"--num-envs-per-env-runner must be at least 1, got {self.num_envs_per_env_runner}"),
            (self.train_batch_size >= 1, f"--train-batch-size must be at least 1, got {self.train_batch_size}"),
            (1 <= self.minibatch_size <= max(self.train_batch_size, 1),
             f"--minibatch-size must be between 1 and --train-batch-size ({self.train_batch_size}), got {self.minibatch_size}"),
            (self.num_epochs >= 1, f"--num-epochs must be at least 1, got {self.num_epochs}"),
            (math.isfinite(self.lr) and 0 <= self.lr <= MAX_LR,
             f"--lr must be in [0, {MAX_LR:g}] (0 freezes the policy), got {self.lr}"),
            (math.isfinite(self.gamma) and 0 < self.gamma <= 1, f"--gamma must be in (0, 1], got {self.gamma}"),
            (math.isfinite(self.gae_lambda) and 0 <= self.gae_lambda <= 1,
             f"--gae-lambda must be in [0, 1], got {self.gae_lambda}"),
            (math.isfinite(self.entropy_coeff) and 0 <= self.entropy_coeff <= MAX_ENTROPY_COEFF,
             f"--entropy-coeff must be in [0, {MAX_ENTROPY_COEFF:g}], got {self.entropy_coeff}"),
            (self.vf_clip > 0, f"--vf-clip must be > 0 (inf: no clip), got {self.vf_clip}"),
            (1 <= len(self.hidden) <= MAX_LAYERS and all(1 <= h <= MAX_HIDDEN for h in self.hidden),
             f"--hidden needs 1 to {MAX_LAYERS} layer sizes in [1, {MAX_HIDDEN}], got {list(self.hidden)[:MAX_LAYERS + 1]}"),
            (self.eval_every >= 1, f"--eval-every must be at least 1, got {self.eval_every}"),
            (self.eval_seeds >= 1, f"--eval-seeds must be at least 1, got {self.eval_seeds}"),
            (self.eval_first_seed >= 0, f"--eval-first-seed must be non-negative, got {self.eval_first_seed}"),
            (math.isfinite(self.promote_at), f"--promote-at must be a finite number, got {self.promote_at}"),
            (self.promote_after >= 0, f"--promote-after must be 0 or more, got {self.promote_after}"),
            (self.torch_threads >= 1, f"--torch-threads must be at least 1, got {self.torch_threads}"),
            (not self.overlap or self.sampler == "lean", "--overlap overlaps the lean sampler with its update: "
             "pass --sampler lean (and --num-env-runners 1 or more)"),
            (math.isfinite(self.snapshot_margin), f"--snapshot-margin must be a finite number, got {self.snapshot_margin}"),
            (self.snapshot_gap >= 1, f"--snapshot-gap must be at least 1, got {self.snapshot_gap}"),
            (math.isfinite(self.favour_strength) and 0 <= self.favour_strength <= MAX_LOGIT_BIAS,
             f"--zero-bias must be in [0, {MAX_LOGIT_BIAS:g}], got {self.zero_bias}"),
            (math.isfinite(self.best_code_bias) and 0 <= self.best_code_bias <= MAX_LOGIT_BIAS,
             f"--best-code-bias must be in [0, {MAX_LOGIT_BIAS:g}], got {self.best_code_bias}"),
            (self.report_seeds >= 2, f"--report-seeds must be at least 2 (a paired CI), got {self.report_seeds}"),
            (self.report_first_seed >= 0, f"--report-first-seed must be non-negative, got {self.report_first_seed}"),
            (self.selection_seeds >= 1, f"--selection-seeds must be at least 1, got {self.selection_seeds}"),
            (self.selection_refine >= 0, f"--selection-refine must be >= 0, got {self.selection_refine}"),
            (self.selection_seeds + self.selection_refine <= SELECTION_ROOM,
             f"--selection-seeds + --selection-refine must be at most {SELECTION_ROOM} (the evaluate seed range), "
             f"got {self.selection_seeds + self.selection_refine}"),
            (math.isfinite(self.mix_share) and 0 < self.mix_share < 1,
             f"--mix-share must be strictly between 0 and 1, got {self.mix_share}"),
            (self.mixture is None or self.mix_background is None,
             "--mixture and --mix-background both replace --background in training episodes: give one (a mixture "
             "file can hold both backgrounds with their shares)"),
            (1 <= self.history <= 64, f"--history must be between 1 and 64 ticks, got {self.history}"),
            (self.eval_scenarios >= 1, f"--eval-scenarios must be at least 1, got {self.eval_scenarios}"),
            (self.validation_scenarios >= 0,
             f"--validation-scenarios must be 0 (none) or more, got {self.validation_scenarios}"),
            (self.patience >= 0, f"--patience must be 0 (never stop early) or more, got {self.patience}"),
            (math.isfinite(self.family_share) and 0 <= self.family_share < 1,
             f"--family-share must be at least 0 and below 1, got {self.family_share}"),
            (not self.net.cell_view or (self.action_codec in ("need", "residual") and self.history == 1
                                     and not self.use_lstm),
             "--network cells acts through a per-(team, tier) codec (--action-codec need or residual) and sees "
             "one tick (--history 1, no --use-lstm)"),
            (self.net.cell_view or self.cell_features == "v1",
             f"--cell-features {self.cell_features} is the cell view's (--network cells): --network "
             f"{self.network} reads the scenario's own observation"),
            (self.critic in self.net.critics, f"--critic {self.critic} is the cell network's (--network cells): "
             f"--network {self.network} has the pooled critic only"),
            (self.critic == "pooled" or (self.sampler == "lean" and self.algo == "PPO"),
             f"--critic {self.critic} gives each cell its own advantage in the lean update: pass --sampler lean "
             "(PPO)"),
            (self.run_name is None or (self.run_name not in ("", ".", "..", LATEST) and "/" not in self.run_name
                                       and "\\" not in self.run_name),
             f"--run-name must be a plain folder name (not {LATEST!r}), got {self.run_name!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        bounded = [("--seed", self.seed, MAX_TRAIN_SEED), ("--num-env-runners", self.num_env_runners, MAX_RUNNERS),
                   ("--num-envs-per-env-runner", self.num_envs_per_env_runner, MAX_ENVS_PER_RUNNER),
                   ("--train-batch-size", self.train_batch_size, MAX_BATCH), ("--num-epochs", self.num_epochs, MAX_EPOCHS),
                   ("--eval-every", self.eval_every, MAX_ITERATIONS), ("--eval-seeds", self.eval_seeds, MAX_EVAL_SEEDS),
                   ("--eval-first-seed", self.eval_first_seed, MAX_FIRST_SEED - self.eval_seeds + 1),
                   ("--report-seeds", self.report_seeds, MAX_EVAL_SEEDS),
                   ("--report-first-seed", self.report_first_seed, MAX_FIRST_SEED - self.report_seeds + 1),
                   ("--selection-seeds", self.selection_seeds, MAX_EVAL_SEEDS),
                   ("--iterations", self.iterations or 0, MAX_ITERATIONS), ("--minutes", self.minutes, MAX_MINUTES),
                   ("--torch-threads", self.torch_threads, MAX_TORCH_THREADS),
                   ("--promote-after", self.promote_after, MAX_ITERATIONS),
                   ("--snapshot-gap", self.snapshot_gap, MAX_ITERATIONS),
                   ("--patience", self.patience, MAX_ITERATIONS),
                   ("--validation-scenarios", self.validation_scenarios, MAX_SPLIT)]
        for flag, value, high in bounded:
            if not value <= high:
                raise ValueError(f"{flag} must be at most {high}, got {value}")

    @property
    def stages(self) -> tuple[str, ...]:
        """Curriculum stages, the mixed tiers, or the one scenario."""
        return self.kind.stages(self)

    @property
    def kind(self) -> Kind:
        """The experiment kind (experiments/training/kinds.py)."""
        return kind_of(self.experiment)

    @property
    def net(self) -> Network:
        """The allocator's network (experiments/training/networks.py), reading the cell features of ``--cell-features``."""
        return network_of(self.network).with_features(f"cells_{self.cell_features}")

    @property
    def favour_strength(self) -> float:
        """``--zero-bias``, or its default for this experiment."""
        return self.zero_bias if self.zero_bias is not None else self.kind.zero_bias

    @property
    def codec(self) -> str | None:
        return None if self.action_codec == "none" else self.action_codec

    @property
    def name(self) -> str:
        if self.run_name:
            return self.run_name
        what = self.kind.label(self.stages)
        if what.endswith(".toml") or "/" in what or "\\" in what:  # a scenario file: its stem, not a path
            what = Path(what).stem
        return f"{self.experiment}-{what}-s{self.seed}"


_HINTS = typing.get_type_hints(TrainArgs)  # the fields' types (Literal choices checked by validate)
