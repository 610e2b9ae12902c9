"""Recorded experiences: any run writes what its workers sample as Parquet files that read
back as the steps the agents took, episode by episode, in every kind of env."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl import Algorithm, ConfigError
from flowrl.apps.cli import main
from flowrl.rollout.experiences import (
    AGENT_ID,
    EPS_ID,
    MANIFEST,
    NEXT_OBS,
    read_experiences,
    read_manifest,
)

SMALL = {"num_workers": 0, "num_envs_per_worker": 4, "rollout_fragment_length": 32, "seed": 0}


def record(tmp_path, env, algo="ppo", iterations=2, **config):
    out = tmp_path / "recorded"
    with Algorithm(algo, env=env, record_experiences=str(out), **{**SMALL, **config}) as run:
        for _ in range(iterations):
            result = run.train()
    return out, result


def check_episodes(rows) -> int:
    """Within each episode, a step's next observation is the next step's observation, and
    only an episode's last step may end it; returns the episodes that ended."""
    ended = 0
    for eps in np.unique(rows[EPS_ID]):
        steps = np.flatnonzero(rows[EPS_ID] == eps)
        obs, nxt = rows["obs"][steps], rows[NEXT_OBS][steps]
        assert np.array_equal(nxt[:-1], obs[1:])
        done = rows["terminateds"][steps] | rows["truncateds"][steps]
        assert not done[:-1].any()
        ended += int(done[-1])
    return ended


def test_a_run_records_its_steps_episode_by_episode(tmp_path):
    out, result = record(tmp_path, "CartPole-v1")
    rows = read_experiences(out)["default"]
    # every step but the reset steps of NEXT_STEP autoreset, raw rewards, finite log-probs
    assert (
        len(rows) <= result["env_steps_sampled"] and len(rows) > 0.9 * result["env_steps_sampled"]
    )
    assert (rows["rewards"] == 1.0).all() and np.isfinite(rows["action_logp"]).all()
    assert check_episodes(rows) == result["episodes_total"]
    assert set(rows[AGENT_ID]) == {""}
    manifest, spaces = read_manifest(out)
    assert manifest["algorithm"] == "ppo" and manifest["env"] == "CartPole-v1"
    assert spaces["default"][0].shape == (4,)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_dict_observations_with_their_mask_round_trip_and_normalising_records_raw_ones(tmp_path):
    out, _ = record(tmp_path, "flowrl.rollout.toy_envs:MaskedChoice", normalize_observations=True)
    rows = read_experiences(out)["default"]
    assert rows["obs"].dtype.names and "action_mask" in rows["obs"].dtype.names
    mask = rows["obs"]["action_mask"]
    assert mask[np.arange(len(rows)), rows["actions"]].all(), "every action was allowed"
    check_episodes(rows)


@pytest.mark.parametrize("env", ["custom_envs:MaskedChoices", "custom_envs:float_tictactoe"])
def test_multi_agent_steps_carry_their_agent(tmp_path, env):
    out, _ = record(tmp_path, env)
    rows = read_experiences(out)["shared"]
    agents = set(rows[AGENT_ID])
    assert len(agents) == 2 and "" not in agents
    for eps in np.unique(rows[EPS_ID])[:20]:  # an episode id is one agent's
        assert len(set(rows[AGENT_ID][rows[EPS_ID] == eps])) == 1


def test_bad_recordings_are_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not a recording of experiences"):
        read_experiences(tmp_path)
    out, _ = record(tmp_path, "CartPole-v1", iterations=1)
    part = next(out.glob("default/*.parquet"))
    part.write_bytes(part.read_bytes()[:100])  # torn
    with pytest.raises(ConfigError, match="damaged recording"):
        read_experiences(out)
    part.unlink()
    with pytest.raises(ConfigError, match="holds no experiences"):
        read_experiences(out)
    (out / MANIFEST).write_text("{")
    with pytest.raises(ConfigError, match="damaged recording"):
        read_experiences(out)


@pytest.mark.ray
def test_remote_workers_record_and_write_what_they_hold_at_the_end(tmp_path, ray_session):
    out, result = record(tmp_path, "CartPole-v1", num_workers=2)
    files = sorted(p.name for p in out.glob("default/*.parquet"))
    assert [f[:10] for f in files] == ["worker-001", "worker-002"]
    rows = read_experiences(out)["default"]
    assert len(np.unique(rows[EPS_ID] >> 40)) == 2  # ids unique over the workers
    assert len(rows) > 0.9 * result["env_steps_sampled"]


def test_the_cli_records(tmp_path):
    out = tmp_path / "recorded"
    run = ["train", "ppo", "--env", "CartPole-v1", "--num-workers", "0", "--stop-iters", "1"]
    assert main([*run, "--no-progress", "--output", str(tmp_path / "run"),
                 "--record-experiences", str(out)]) == 0  # fmt: skip
    assert len(read_experiences(out)["default"]) > 0
