"""simia-art: simia episodes as OpenPipe ART rollouts, rewarded by simia's judge.

async with SimiaEnv("http://127.0.0.1:8765", "mock") as env:
    scenarios = await env.scenarios()                  # one per task of the world
    group = art.TrajectoryGroup(env.rollout(model, scenarios[0], group="g0") for _ in range(4))
"""

from .rollout import RewardMasked, Scenario, SimiaEnv

__all__ = ["RewardMasked", "Scenario", "SimiaEnv"]
