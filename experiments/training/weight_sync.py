"""Push the learner's weights to every env runner and wait until each holds them.

Its own module (not :mod:`experiments.training.weights`, which reads the run's setup) so that
:mod:`experiments.training.warm_start`, which the setup reads, can use it without an import cycle.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO


def push_learner_weights(algo: Any) -> None:
    """The learner's weights to every env runner (the driver's and the remote ones), returning
    once each holds them.

    Not RLlib's ``EnvRunnerGroup.sync_weights``: it is fire-and-forget and drops the push to a
    runner that has a push still in flight (one ``set_state`` request per runner). Right after
    ``build_algo()`` or ``restore_from_path()`` that is the push those sent themselves, so
    whether a remote runner played its first iteration with these weights or with the initial
    ones was a matter of timing (RLlib 2.60): two runs of one seed with a background mix on two
    remote runners sampled different first iterations. A call on every runner is queued behind
    any push in flight and waited for. The learner's ``weights_seq_no`` goes along, as RLlib's does.
    """
    state = algo.learner_group.get_state(components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}",
                                         inference_only=True)[COMPONENT_LEARNER]
    weights = {k: v for k, v in state.items() if k in (COMPONENT_RL_MODULE, WEIGHTS_SEQ_NO)}
    algo.env_runner_group.foreach_env_runner(lambda runner: runner.set_state(weights), local_env_runner=True)


__all__ = ["push_learner_weights"]
