"""RLlib callbacks of a training run and the one way to reach the envs it samples with.

:class:`RewardTermsCallback` logs the allocator's per-term episode sums, episode totals and
normalised score; :class:`CurriculumCallback` promotes the curriculum on that score. A
switch of scenario (and any other message to the envs or the acting modules) goes through
:func:`foreach_sampling_runner`: with remote env runners the driver's runner holds no env.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback

from commons_arena.enums import ALLOCATOR
from experiments.training.env import MIX_INFO, MIXTURE_INFO
from experiments.training.env_config import ArenaEnvConfig, Scenario

# Where the allocator's custom metrics land: result["env_runners"][<this>][<term>].
REWARD_TERMS_KEY = "allocator_reward_terms"
EPISODE_TOTALS_KEY = "allocator_episode"
TERM_PREFIX = "term/"  # an episode total that is a reward term's sum (commons_arena.ledger)
MIX_SHARE_KEY = "mix_background_share"  # share of the training episodes that played the mix background
MIXTURE_SHARES_KEY = "mixture_shares"  # entry name -> share of the training episodes that played it


class RewardTermsCallback(RLlibCallback):
    """Logs, per finished episode, the allocator's summed reward terms and episode totals.

    Results: ``result["env_runners"]["allocator_reward_terms"][term]`` (the episode's sum of
    ``infos["allocator"]["reward_terms"][term]``) and
    ``result["env_runners"]["allocator_episode"][key]`` (the final ``infos[...]["episode"]``),
    each a mean over the last ``metrics_num_episodes_for_smoothing`` episodes. TensorBoard
    shows them as ``env_runners/allocator_reward_terms/<term>``.

    The term sums are the episode totals' ``term/<name>`` entries: the env's ledger adds the
    same per-tick terms in the same order, so they equal the step-by-step sums to the bit, and
    reading them once at the end costs no callback per step (one per step was a tenth of a
    sampling step's time). The last step's infos hold them in whichever chunk the episode ends.
    """

    agent_id: str = ALLOCATOR

    def on_episode_end(
        self,
        *,
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        **kwargs: Any,
    ) -> None:
        if metrics_logger is None:
            return
        # Same smoothing as RLlib's own episode metrics; divided by the runner count
        # because the runners' windows are merged in the algorithm process.
        window = 100
        if env_runner is not None:
            cfg = env_runner.config
            window = max(1, math.ceil(cfg.metrics_num_episodes_for_smoothing / (cfg.num_env_runners or 1)))
        final = episode.get_infos(-1, agent_ids=[self.agent_id]).get(self.agent_id) or {}
        totals = final.get("episode", {})
        if MIX_INFO in final:
            log_background_draw(metrics_logger, None, int(final[MIX_INFO]), window)
        if MIXTURE_INFO in final and env_runner is not None:
            log_background_draw(metrics_logger, ArenaEnvConfig.of(env_runner.config.env_config),
                                int(final[MIXTURE_INFO]), window)
        log_episode_totals(metrics_logger, totals, final.get("scenario_hash"),
                           ArenaEnvConfig.of(env_runner.config.env_config) if env_runner is not None else None, window)


def log_background_draw(metrics_logger: Any, env_config: ArenaEnvConfig | None, entry: int, window: int) -> None:
    """Which background a finished episode played: of a ``--mix-background`` (``env_config`` None; entry 1: the
    mix), or of a ``--mixture`` (entry: its index), as the share of the window's episodes that played each."""
    mixture = None if env_config is None else env_config.background_mixture
    if mixture is None:
        metrics_logger.log_value(MIX_SHARE_KEY, float(entry == 1), reduce="mean", window=window)
        return
    for i, name in enumerate(mixture.names):
        metrics_logger.log_value((MIXTURE_SHARES_KEY, name), float(entry == i), reduce="mean", window=window)


def log_episode_totals(metrics_logger: Any, totals: dict[str, float], scenario_hash: Any,
                       env_config: ArenaEnvConfig | None, window: int) -> None:
    """The allocator's episode totals of one finished episode (its reward terms' sums among them) and its
    normalised score, against the random/oracle means of the held-out seeds
    (``ArenaEnvConfig.score_anchors[scenario hash]``, set by experiments.training.algorithm)."""
    for key, total in totals.items():
        if key.startswith(TERM_PREFIX):
            metrics_logger.log_value((REWARD_TERMS_KEY, key[len(TERM_PREFIX):]), total, reduce="mean", window=window)
    for key, value in totals.items():
        metrics_logger.log_value((EPISODE_TOTALS_KEY, key), float(value), reduce="mean", window=window)
    anchors = (env_config.score_anchors if env_config is not None else {}).get(str(scenario_hash))
    if anchors and "return" in totals:
        span = anchors["oracle"] - anchors["random"]
        if abs(span) > 1e-9:
            score = (totals["return"] - anchors["random"]) / span
            metrics_logger.log_value((EPISODE_TOTALS_KEY, "normalised_score"), score, reduce="mean", window=window)


class CurriculumCallback(RewardTermsCallback):
    """Promotes every env to the next curriculum stage when the training episodes'
    normalised score (the smoothed ``allocator_episode/normalised_score`` metric) reaches
    ``promote_at``, at most once every ``min_iterations`` iterations (the smoothing window
    still holds the previous stage's episodes right after a switch).

    The env config's :class:`~experiments.training.env_config.Curriculum` says when; the current
    stage index is written to ``result["curriculum_stage"]``.
    """

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        curriculum = ArenaEnvConfig.of(algorithm.config.env_config).curriculum
        if curriculum is None:
            return
        stage = getattr(algorithm, "_arena_stage", curriculum.stage)
        since = getattr(algorithm, "_arena_stage_iterations", 0) + 1
        score = result.get("env_runners", {}).get(EPISODE_TOTALS_KEY, {}).get("normalised_score")
        if (
            score is not None
            and score >= curriculum.promote_at
            and since >= curriculum.min_iterations
            and stage + 1 < len(curriculum.stages)
        ):
            stage += 1
            since = 0
            set_scenario_everywhere(algorithm, curriculum.stages[stage])
        algorithm._arena_stage = stage
        algorithm._arena_stage_iterations = since
        result["curriculum_stage"] = stage


def foreach_sampling_runner(algorithm: Any, fn: Callable[[Any], Any]) -> list[Any]:
    """``fn(runner)`` on every env runner that samples, i.e. holds envs and acting modules:
    the remote runners when there are any (the driver's local runner then has no env,
    ``runner.env`` is None), else the local one. Returns the results in runner order."""
    group = algorithm.env_runner_group
    return list(group.foreach_env_runner(fn, local_env_runner=group.num_remote_env_runners() == 0))


def set_scenario_everywhere(algorithm: Any, scenario: Scenario) -> None:
    """Switch every env of every sampling env runner to ``scenario`` from their next episode on."""

    def switch(runner: Any) -> None:
        for env in runner.env.envs:
            env.unwrapped.set_scenario(scenario)

    foreach_sampling_runner(algorithm, switch)
