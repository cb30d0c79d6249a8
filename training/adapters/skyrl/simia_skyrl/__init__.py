"""simia-skyrl: simia episodes as a SkyRL gym environment, rewarded by simia's judge.

    import skyrl_gym
    from simia_skyrl import register

    register()  # skyrl_gym id "simia" -> SimiaTextEnv
    env = skyrl_gym.make("simia", env_config={"server": "http://127.0.0.1:8765"},
                         extras={"world": "mock", "task": "restock_milk", "max_turns": 6})

`python -m simia_skyrl.dataset` writes a world's tasks as rows for SkyRL's dataset (`env_class: simia`).
"""

from .env import ENV_ID, SimiaTextEnv, register

__all__ = ["ENV_ID", "SimiaTextEnv", "register"]
