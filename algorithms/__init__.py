"""The algorithms that ship with flowrl, one file each (installed as ``flowrl.algorithms``)."""

NAMES = ("ppo", "a3c", "dqn", "sac", "impala", "appo", "apex", "bc", "marwil", "iql")
