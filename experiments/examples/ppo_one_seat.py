"""Train one seat with a short plain-PyTorch PPO on :class:`policies.focal_vector.FocalVectorEnv` (CleanRL's shape:
arguments, seeding, rollout buffers ``[T, N]``, GAE, clipped updates, read top to bottom). No RLlib.

    python -m experiments.examples.ppo_one_seat --seat allocator --scenario standard --total-steps 300000

The env is a ``gymnasium.vector.VectorEnv``: the seat's raw observation (scaled here by the env's
:func:`~policies.focal_vector.seat_observation_scale`), its ``MultiDiscrete`` action, the scenario's own
background acting inside. Its autoreset is NEXT_STEP: the row after an arena's last step is its reset, no
transition, so it is masked out of the loss and GAE stops at every episode's end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import tyro
from torch import nn

from policies.focal_vector import FocalVectorEnv, seat_observation_scale


@dataclass
class Args:
    seat: str = "allocator"
    """the seat that learns (the scenario's population plays the others)"""
    scenario: str = "standard"
    """a shipped scenario or a TOML path"""
    num_envs: int = 256
    """arenas stepped at once"""
    steps: int = 16
    """rollout length per update (rows per update: num_envs x steps)"""
    total_steps: int = 300_000
    """env steps to train for"""
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.9
    clip: float = 0.2
    epochs: int = 3
    minibatches: int = 4
    entropy: float = 0.005
    seed: int = 0


class ActorCritic(nn.Module):
    def __init__(self, obs_size: int, nvec: list[int], hidden: int = 128) -> None:
        super().__init__()
        self.nvec = nvec
        self.body = nn.Sequential(nn.Linear(obs_size, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi, self.v = nn.Linear(hidden, sum(nvec)), nn.Linear(hidden, 1)

    def forward(self, obs: torch.Tensor) -> tuple[list[torch.distributions.Categorical], torch.Tensor]:
        h = self.body(obs)
        dists = [torch.distributions.Categorical(logits=part) for part in torch.split(self.pi(h), self.nvec, -1)]
        return dists, self.v(h).squeeze(-1)


def joint_logp_entropy(dists: list[torch.distributions.Categorical], actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability and entropy of the joint action (sums over the sub-actions)."""
    logp = sum(d.log_prob(actions[..., j]) for j, d in enumerate(dists))
    return logp, sum(d.entropy() for d in dists)  # type: ignore[return-value]


def train_ppo(args: Args) -> list[float]:
    """Train and return the mean return of the episodes finished in each update."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    env = FocalVectorEnv(args.scenario, num_envs=args.num_envs, focal=args.seat)
    scale = torch.from_numpy(seat_observation_scale(args.scenario, args.seat, seed=args.seed))
    nvec = [int(n) for n in env.seat_action_spaces[args.seat].nvec]
    width = int(env.seat_observation_spaces[args.seat].shape[0])
    agent = ActorCritic(width, nvec)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr)
    T, N = args.steps, args.num_envs
    obs_buf = torch.zeros((T + 1, N, width))
    act_buf = torch.zeros((T, N, len(nvec)), dtype=torch.long)
    logp_buf, rew_buf, done_buf, valid_buf = (torch.zeros((T, N)) for _ in range(4))
    obs, _ = env.reset(seed=args.seed)
    restarting = np.zeros(N, dtype=bool)
    returns: list[float] = []
    start = time.perf_counter()
    for update in range(args.total_steps // (T * N)):
        finished = []
        for t in range(T):  # ---- rollout
            obs_buf[t] = torch.from_numpy(obs) / scale
            with torch.no_grad():
                dists, _ = agent(obs_buf[t])
                action = torch.stack([d.sample() for d in dists], -1)
                logp_buf[t] = joint_logp_entropy(dists, action)[0]
            act_buf[t] = action
            obs, reward, terminated, truncated, infos = env.step(action.numpy())
            valid_buf[t] = torch.from_numpy(~restarting).float()  # an arena's reset row is no transition
            rew_buf[t], done_buf[t] = torch.from_numpy(reward).float(), torch.from_numpy(terminated | truncated).float()
            if "_episode" in infos:
                finished += infos["episode"]["return"][infos["_episode"]].tolist()
            restarting = terminated | truncated
        obs_buf[T] = torch.from_numpy(obs) / scale
        with torch.no_grad():  # ---- GAE over the arrays (a truncation here bootstraps like a time cut)
            values = agent(obs_buf.reshape(-1, obs_buf.shape[-1]))[1].reshape(T + 1, N)
            adv, carry = torch.zeros((T, N)), torch.zeros(N)
            for t in reversed(range(T)):
                delta = rew_buf[t] + args.gamma * values[t + 1] * (1 - done_buf[t]) - values[t]
                carry = delta + args.gamma * args.gae_lambda * (1 - done_buf[t]) * carry
                adv[t] = carry
            targets = adv + values[:-1]
        keep = valid_buf.reshape(-1) > 0  # ---- PPO on the transitions
        b_obs, b_act = obs_buf[:-1].reshape(T * N, -1)[keep], act_buf.reshape(T * N, -1)[keep]
        b_logp, b_adv, b_tgt = logp_buf.reshape(-1)[keep], adv.reshape(-1)[keep], targets.reshape(-1)[keep]
        b_adv = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8)
        for _ in range(args.epochs):
            for idx in torch.randperm(len(b_obs)).chunk(args.minibatches):
                dists, value = agent(b_obs[idx])
                logp, entropy = joint_logp_entropy(dists, b_act[idx])
                ratio = (logp - b_logp[idx]).exp()
                policy_loss = -torch.min(ratio * b_adv[idx], ratio.clamp(1 - args.clip, 1 + args.clip) * b_adv[idx]).mean()
                loss = policy_loss + 0.5 * ((value - b_tgt[idx]) ** 2).mean() - args.entropy * entropy.mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
        returns.append(float(np.mean(finished)) if finished else float("nan"))
        steps = (update + 1) * T * N
        print(f"update {update + 1}: {steps:,} env steps, {steps / (time.perf_counter() - start):,.0f}/s, "
              f"episode return {returns[-1]:.1f}")
    return returns


if __name__ == "__main__":
    train_ppo(tyro.cli(Args))
