"""Multi-policy batches and the operators that route them, on plain lists (no Ray): the
first pieces of multi-agent training (issue 31)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from flowrl import Algorithm, LocalIterator, MultiAgentBatch, SampleBatch
from flowrl.apps.cli import main
from flowrl.ops import ConcatBatches, SelectExperiences


def fragment(ppo_rows: int, dqn_rows: int, env_steps: int, start: float = 0.0) -> MultiAgentBatch:
    parts = {"ppo": SampleBatch(x=start + np.arange(ppo_rows, dtype=float))}
    if dqn_rows:
        parts["dqn"] = SampleBatch(x=-np.arange(dqn_rows, dtype=float))
    return MultiAgentBatch(parts, env_steps)


def test_a_multi_agent_batch_counts_env_steps_not_rows():
    batch = fragment(ppo_rows=8, dqn_rows=4, env_steps=4)  # two ppo agents, one dqn agent
    assert len(batch) == 4 and len(batch["ppo"]) == 8 and "dqn" in batch
    assert batch.select(["dqn", "nobody"]).policy_ids == ["dqn"]
    assert len(batch.select([])) == 4  # the same env steps, no rows


def test_concat_keeps_each_policy_s_rows_in_order_even_when_a_policy_sat_out():
    first, second = fragment(3, 2, 3), fragment(2, 0, 2, start=10.0)  # no dqn agent in it
    both = MultiAgentBatch.concat([first, second])
    assert len(both) == 5 and both.policy_ids == ["ppo", "dqn"]
    assert both["ppo"]["x"].tolist() == [0.0, 1.0, 2.0, 10.0, 11.0]
    assert len(both["dqn"]) == 2


def test_concat_batches_then_select_experiences_route_one_policy_s_rows():
    items = [fragment(4, 2, 2, start=i * 100.0) for i in range(6)]
    batches = (
        LocalIterator.from_items(items)
        .combine(ConcatBatches(min_batch_size=4))
        .for_each(SelectExperiences(["dqn"]))
        .take(3)
    )
    assert [len(b) for b in batches] == [4, 4, 4]  # env steps of two fragments each
    assert all(b.policy_ids == ["dqn"] and len(b["dqn"]) == 4 for b in batches)


def test_select_experiences_wants_a_list_of_ids():
    with pytest.raises(TypeError, match="list of policy ids"):
        SelectExperiences("ppo")
    assert repr(SelectExperiences(["ppo"])) == "SelectExperiences(['ppo'])"


def test_the_independent_cartpoles_follow_pettingzoo_s_parallel_api():
    from pettingzoo.test import parallel_api_test

    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    parallel_api_test(IndependentCartPoles(agents=3), num_cycles=300)
    env = IndependentCartPoles(agents=2)
    env.reset(seed=0)
    left = []
    while env.agents:  # an agent whose pole falls leaves; the others go on
        _, _, terms, truncs, _ = env.step({a: 0 for a in env.agents})
        left += [a for a in terms if terms[a] or truncs[a]]
    assert sorted(left) == ["cartpole_0", "cartpole_1"]


def lanes_of(agents=2, num_envs=3, policy_of=lambda agent: agent):
    from flowrl.rollout.multi_agent import AgentLanes
    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    return AgentLanes(lambda: IndependentCartPoles(agents), num_envs=num_envs, policy_of=policy_of)


def test_each_policy_sees_its_agents_of_every_copy_as_lanes():
    independent = lanes_of()
    obs = independent.reset(seed=0)
    assert independent.policy_ids == ["cartpole_0", "cartpole_1"]
    assert {pid: o.shape for pid, o in obs.items()} == {"cartpole_0": (3, 4), "cartpole_1": (3, 4)}
    shared = lanes_of(policy_of=lambda agent: "shared")
    assert shared.reset(seed=0)["shared"].shape == (6, 4)
    assert shared.lanes["shared"][:2] == [(0, "cartpole_0"), (0, "cartpole_1")]


def test_an_agent_that_finishes_waits_for_its_copy_which_resets_in_one_step():
    lanes = lanes_of(num_envs=1, policy_of=lambda agent: "shared")
    lanes.reset(seed=0)
    rng = np.random.default_rng(0)
    history = []  # (valid, terminated or truncated, rewards) per step
    for _ in range(200):
        obs_before, valid = lanes.obs["shared"].copy(), lanes.active["shared"].copy()
        out = lanes.step({"shared": rng.integers(0, 2, size=2)})
        obs, rewards, term, trunc = (part["shared"] for part in out)
        history.append((valid, term | trunc, rewards, obs_before, obs))
    valid = np.array([h[0] for h in history])
    done = np.array([h[1] for h in history])
    rewards = np.array([h[2] for h in history])
    assert (rewards[~valid] == 0).all() and (rewards[valid] == 1).all()
    assert not done[~valid].any()  # flags only on real steps
    for lane in range(2):
        for t in np.flatnonzero(done[:, lane])[:3]:
            assert not valid[t + 1, lane]  # gone until its copy starts over
            np.testing.assert_array_equal(history[t + 1][3][lane], history[t][4][lane])  # final obs
    # the copy resets one step after its last agent left, then both lanes act again
    both_gone = np.flatnonzero(~valid.any(axis=1))
    assert len(both_gone) > 0
    t = both_gone[0]
    assert valid[t + 1].all() and not valid[t].any()


def test_a_policy_over_agents_with_different_spaces_is_refused():
    import gymnasium as gym

    from flowrl import ConfigError
    from flowrl.rollout.multi_agent import AgentLanes
    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    class Uneven(IndependentCartPoles):
        def observation_space(self, agent):
            if agent == "cartpole_1":
                return gym.spaces.Box(-1, 1, (2,))
            return super().observation_space(agent)

    with pytest.raises(ConfigError, match="policy 'shared' acts for agents with different obs"):
        AgentLanes(lambda: Uneven(2), num_envs=1, policy_of=lambda agent: "shared")


POLES = "flowrl.rollout.toy_multi_agent:IndependentCartPoles"


def worker_of(**settings):
    from flowrl.algorithms.ppo import PPOConfig, PPOLearner, PPOPolicy
    from flowrl.rollout.worker import RolloutWorker

    config = PPOConfig(**{"env": POLES, "num_workers": 0, "num_envs_per_worker": 3, **settings})
    return RolloutWorker(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=config)


def test_a_multi_agent_worker_samples_each_policy_s_rows_and_episodes():
    worker = worker_of(policy_mapping="independent", rollout_fragment_length=100)
    batch = worker.sample()
    assert isinstance(batch, MultiAgentBatch) and len(batch) == 300  # env steps of 3 copies
    assert batch.policy_ids == ["cartpole_0", "cartpole_1"]
    assert all(0 < len(batch[pid]) <= 300 for pid in batch.policy_ids)
    assert {"advantages", "value_targets"} <= set(batch["cartpole_0"].keys())
    episodes, _, _ = worker.get_metrics()
    assert episodes and all(ep.episode_return == sum(ep.agents.values()) for ep in episodes)
    assert all(ep.length == max(ep.agents.values()) for ep in episodes)  # a pole's reward is 1
    stats = worker.learner.learn_on_batch(batch, num_sgd_iter=1)
    assert (
        sorted(stats) == ["cartpole_0", "cartpole_1"]
        and "policy/cartpole_1/vf_loss" in stats.flat()
    )

    shared = worker_of(rollout_fragment_length=50).sample()  # the default: one shared policy
    assert shared.policy_ids == ["shared"] and 300 // 2 < len(shared["shared"]) <= 300


def test_policy_settings_and_mappings_are_checked_in_one_line():
    from flowrl import Config, ConfigError
    from flowrl.rollout.multi_agent import policy_mapping

    with pytest.raises(ConfigError, match="policy_mapping must be shared, independent"):
        Config(policy_mapping="by-team")
    with pytest.raises(ConfigError, match=r"policies\['a'\] expects a mapping"):
        Config(policies={"a": 3})
    with pytest.raises(ConfigError, match="policy id is a non-empty name without '/'"):
        Config(policies={"a/b": {}})
    assert Config(policy_mapping='{"x": "p"}').policy_mapping == {"x": "p"}  # JSON on the CLI
    with pytest.raises(ConfigError, match="no policy for agent 'y'"):
        policy_mapping({"x": "p"})("y")
    assert policy_mapping("shared", ["main"])("anyone") == "main"
    assert policy_mapping("test_multi_agent:team_of")("cartpole_1") == "odd"
    # a typo in a mapping trained a policy nobody configured; None trained a policy "None"
    two = {"ppo": {}, "dqn": {"lr": 1e-4}}
    with pytest.raises(ConfigError, match="policy 'DQN', which policies does not configure"):
        Algorithm("ppo", env=POLES, num_workers=0, policies=two,
                  policy_mapping={"cartpole_0": "ppo", "cartpole_1": "DQN"})  # fmt: skip
    with pytest.raises(ConfigError, match=r"from test_multi_agent:no_team\) gave agent"):
        Algorithm("ppo", env=POLES, num_workers=0, policy_mapping="test_multi_agent:no_team")
    # and a typo in policies: settings of a policy no agent acts with went unused, silently
    with pytest.raises(ConfigError, match=r"'agent_1', which no agent .* cartpole_0, cartpole_1"):
        Algorithm("ppo", env=POLES, num_workers=0, policy_mapping="independent",
                  policies={"agent_1": {"lr": 1e-4}})  # fmt: skip


def no_team(agent):
    """A mapping function that forgot to return."""


def team_of(agent: str) -> str:
    return "odd" if int(agent.rsplit("_", 1)[1]) % 2 else "even"


def test_a_policy_of_another_algorithm_keeps_its_own_defaults_and_the_run_s_sampling():
    from flowrl import ConfigError
    from flowrl.algorithms.ppo import ALGORITHM, PPOConfig
    from flowrl.run.spec import policy_specs

    config = PPOConfig(env=POLES, seed=7, policies={"q": {"algorithm": "dqn", "lr": 2e-4}, "p": {}})
    specs = policy_specs(ALGORITHM, config)
    assert specs["q"].config.algo_name == "dqn" and specs["q"].config.seed == 7
    assert specs["q"].config.lr == 2e-4 and specs["q"].config.env == POLES
    assert specs["p"].config.lr == config.lr and specs["p"].learner_cls.__name__ == "PPOLearner"
    with pytest.raises(ConfigError, match=r"policies\['q'\]: unknown config key 'clip_param'"):
        policy_specs(ALGORITHM, PPOConfig(policies={"q": {"algorithm": "dqn", "clip_param": 1}}))
    # PPO's own plan trained a DQN policy as PPO's: no replay, its target never copied
    mixed = {"p": {}, "q": {"algorithm": "dqn"}}
    with pytest.raises(ConfigError, match=r"policies\['q'\] learns with dqn, but ppo's plan"):
        Algorithm("ppo", env=POLES, num_workers=0, policies=mixed, policy_mapping="independent")
    frozen = {"p": {}, "q": {"algorithm": "dqn", "trainable": False}}  # acts, never trained
    Algorithm("ppo", env=POLES, num_workers=0, policies=frozen,
              policy_mapping={"cartpole_0": "p", "cartpole_1": "q"}).stop()  # fmt: skip


def test_a_policy_buffer_per_policy_samples_what_is_ready():
    from flowrl.replay import PolicyBuffers, ReplayBuffer

    buffers = PolicyBuffers(lambda i: ReplayBuffer(10, seed=i))
    buffers.add(fragment(ppo_rows=6, dqn_rows=2, env_steps=6))
    assert buffers.sample_after(4, learning_starts=4).policy_ids == ["ppo"]
    buffers.add(fragment(ppo_rows=6, dqn_rows=2, env_steps=6))
    both = buffers.sample_after(4, learning_starts=4)
    assert both.policy_ids == ["ppo", "dqn"] and len(both["dqn"]) == 4 and len(both) == 4
    restored = PolicyBuffers(lambda i: ReplayBuffer(10, seed=i))
    restored.set_state(buffers.get_state())
    assert len(restored) == len(buffers) == 10 + 4


ALGORITHM_SETTINGS = {  # small rounds: one iteration each
    "ppo": {"train_batch_size": 512},
    "a3c": {},
    "impala": {},
    "appo": {},
    "dqn": {"learning_starts": 64},
    "apex": {"replay_shards": 0, "learning_starts": 64},
    "sac": {"discrete": True, "learning_starts": 64, "min_env_steps_per_iteration": 200},
}


@pytest.mark.parametrize("name", list(ALGORITHM_SETTINGS))
def test_every_algorithm_trains_a_policy_per_agent(name):
    from flowrl import Algorithm

    settings = {"num_workers": 0, "policy_mapping": "independent", **ALGORITHM_SETTINGS[name]}
    algo = Algorithm(name, env=POLES, **settings)
    try:
        result = algo.train()
        while result["env_steps_trained"] == 0:
            result = algo.train()
    finally:
        algo.stop()
    for pid in ("cartpole_0", "cartpole_1"):
        assert any(k.startswith(f"policy/{pid}/") and "return" not in k for k in result), name
        assert result[f"agent/{pid}/episode_return_mean"] > 0


def agents_reach(algo, reward: float, budget: int) -> dict[str, float]:
    """Train until every agent's mean return reaches ``reward`` at once or ``budget`` env
    steps (at least any agent's own) are sampled; each agent's mean return and the steps."""
    return first_reaching(algo, reward, budget, together=True)


def first_reaching(algo, reward: float, budget: int, together: bool = False) -> dict[str, float]:
    """Train until every agent's mean return has reached ``reward`` (at once when
    ``together``) or ``budget`` env steps are sampled; each agent's last mean return, the
    env steps at which it first reached ``reward`` (``"<agent>@"``, absent if it never
    did) and the steps sampled."""
    first: dict[str, float] = {}
    try:
        while True:
            result = algo.train()
            means = {k.split("/")[1]: v for k, v in result.items() if k.startswith("agent/")}
            steps = result["env_steps_sampled"]
            first = {f"{a}@": steps for a, m in means.items() if m >= reward} | first
            done = min(means.values()) >= reward if together else len(first) == len(means)
            if (means and done) or steps >= budget:
                return {**means, **first, "env_steps": steps}
    finally:
        algo.stop()


@pytest.mark.slow
def test_two_independent_ppo_policies_each_reach_450_within_150k_env_steps():
    from flowrl import Algorithm

    algo = Algorithm("ppo", env=POLES, num_workers=0, policy_mapping="independent", seed=1)
    reached = agents_reach(algo, 450, 150_000)
    assert min(reached["cartpole_0"], reached["cartpole_1"]) >= 450, reached


@pytest.mark.slow
def test_the_composed_plan_trains_agent_0_with_ppo_and_agent_1_with_dqn():
    from flowrl import Algorithm
    from flowrl.run.spec import get_algorithm

    example = Path(__file__).parents[1] / "examples" / "ppo_and_dqn.py"
    algo = Algorithm(get_algorithm(f"{example}:plan"), env=POLES, num_workers=0, seed=0)
    assert type(algo.workers.learner["dqn"]).__name__ == "DQNLearner"
    reached = first_reaching(algo, 450, 200_000)
    # each within its algorithm's own learning-test budget: PPO 150k, DQN 200k
    assert reached.get("cartpole_0@", math.inf) <= 150_000, reached
    assert reached.get("cartpole_1@", math.inf) <= 200_000, reached


TICTACTOE = "pettingzoo.classic.tictactoe_v3:env"


class Scripted:
    """A policy stand-in that plays the first legal move, recording a value of 0.5."""

    def __init__(self, lanes):
        self.observation_space = lanes.observation_spaces["shared"]
        self.action_space = lanes.action_spaces["shared"]

    def act(self, obs, explore=True):
        from flowrl.learning.acting import Acted

        actions = np.array([np.argmax(m) for m in obs["action_mask"]])  # 0 when none is legal
        values = np.full(len(obs), 0.5, np.float32)
        return Acted(actions, (("obs", obs), ("actions", actions), ("vf_preds", values)), None)

    def initial_state(self, n):
        return None

    class normalizer:
        parts = ()
        ret = None

        @staticmethod
        def observations(obs):
            return obs

        @staticmethod
        def scale_rewards(rewards, done, valid):
            return rewards


def test_a_turn_based_game_credits_each_agent_s_last_move_with_what_followed_it():
    from pettingzoo.classic import tictactoe_v3

    from flowrl.rollout.sampler import Sampler
    from flowrl.rollout.turns import TurnLanes

    lanes = TurnLanes(tictactoe_v3.env, num_envs=1, policy_of=lambda agent: "shared")
    sampler = Sampler(lanes, {"shared": Scripted(lanes)}, seed=0, where="test")
    # first legal move each turn: player_1 takes 0, 2, 4, 6 and wins on its 4th move (7
    # moves); then a step resets the game, and player_1 moves first in the next
    fragment = sampler.sample(9)["shared"]
    cols, valid = fragment.columns, fragment.valid
    assert valid.shape[1] == 2 and lanes.take_episodes()[0].agents == {
        "player_1": 1.0,
        "player_2": -1.0,
    }
    first, second = cols["rewards"][:, 0][valid[:, 0]], cols["rewards"][:, 1][valid[:, 1]]
    assert first.tolist() == [0, 0, 0, 1] and second.tolist() == [0, 0, -1]  # the loser's last
    assert cols["terminateds"][valid].sum() == 2  # each agent's last move ends its game
    # each lane ends with the game's final observation, not learned from, valued for bootstraps
    assert not valid[-1].any() and (cols["vf_preds"][-1] == 0.5).all()
    assert valid[:, 1].sum() == 3 and not valid[0, 1]  # right-aligned: shorter lanes start late
    # a lane's last move waits for what follows it: player_1's opens the next fragment,
    # whose last moves (player_2's, then player_1's) wait in turn
    following = sampler.sample(2)["shared"]
    assert following.valid.tolist() == [[True, False]] and lanes.illegal_moves == {"shared": 0}


@pytest.mark.parametrize("use_lstm", [False, True])
def test_a_games_sequences_for_v_trace_are_whole_however_many_turns_a_lane_took(use_lstm):
    """A turn-based game's fragment holds each lane's turns, fewer than the fragment's
    steps: IMPALA's learner cut its rows into sequences of the fragment's steps, across
    lanes, and with an LSTM two fragments' state columns did not concatenate."""
    from flowrl import Algorithm
    from flowrl.core.sample_batch import MultiAgentBatch

    config = {"num_workers": 0, "num_envs_per_worker": 2, "use_lstm": use_lstm}
    with Algorithm("impala", env=TICTACTOE, **config) as algo:
        steps = algo.config.rollout_fragment_length
        worker = algo.workers.local_worker
        batches = [worker.sample().policy_batches["shared"] for _ in range(3)]
        for batch in batches:
            valid = batch["valid"].reshape(-1, steps + 1)  # a sequence a lane (2 a game)
            assert len(valid) == 4 and not valid[:, -1].any()  # each ends in its bootstrap
            assert valid.sum() < 4 * steps  # turns: fewer than the steps
        joined = MultiAgentBatch.concat([MultiAgentBatch({"shared": b}, 1) for b in batches])
        assert len(joined.policy_batches["shared"]) == 12 * (steps + 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "budget"),
    # APPO's full-batch steps before its minibatch epochs: 0.86/0.63 at 250k env steps
    [("ppo", 30_000), ("appo", 60_000)],
)
def test_self_play_beats_a_random_tic_tac_toe_player_in_either_seat_without_illegal_moves(
    algo, budget
):
    from pettingzoo.classic import tictactoe_v3

    from flowrl import Algorithm
    from flowrl.ops.selfplay import RandomMoves, match

    algo = Algorithm(algo, env=TICTACTOE, num_workers=0, seed=0)  # one policy, both seats
    try:
        while (result := algo.train())["env_steps_sampled"] < budget:
            pass
        policy = algo.workers.local_worker.policies["shared"]
        rates = match(tictactoe_v3.env, policy, RandomMoves(0), games=1000)
    finally:
        algo.stop()
    assert result["worker_0/illegal_moves"] == 0 and rates["illegal_moves"] == 0
    assert rates["win_or_draw_as_player_1"] >= 0.9, rates
    assert rates["win_or_draw_as_player_2"] >= 0.9, rates


def test_match_plays_both_seats_through_the_sampler_a_recurrent_policy_too():
    from pettingzoo.classic import tictactoe_v3

    from flowrl.algorithms.ppo import PPOConfig, PPOPolicy
    from flowrl.core.config import ConfigError
    from flowrl.ops.selfplay import RandomMoves, match
    from flowrl.rollout.turns import TurnLanes

    rates = match(tictactoe_v3.env, RandomMoves(1), RandomMoves(2), games=200, copies=4)
    assert rates["illegal_moves"] == 0
    assert math.isclose(rates["win"] + rates["draw"] + rates["loss"], 1)
    assert rates["win_or_draw_as_player_1"] > rates["win_or_draw_as_player_2"]  # moves first
    lanes = TurnLanes(tictactoe_v3.env, num_envs=1, policy_of=lambda agent: "p")
    spaces = lanes.observation_spaces["p"], lanes.action_spaces["p"]
    lanes.close()
    lstm = PPOPolicy(*spaces, PPOConfig(use_lstm=True))  # its state kept per lane
    assert match(tictactoe_v3.env, lstm, RandomMoves(0), games=20)["illegal_moves"] == 0
    with pytest.raises(ConfigError, match="at least one game"):
        match(tictactoe_v3.env, lstm, RandomMoves(0), games=0)


def test_self_play_keeps_a_pool_of_snapshots_and_seats_one_against_the_policy(tmp_path):
    from flowrl import Algorithm
    from flowrl.run.spec import get_algorithm

    example = get_algorithm(f"{Path(__file__).parents[1] / 'examples' / 'self_play.py'}:plan")
    settings = {"num_workers": 0, "num_envs_per_worker": 4, "train_batch_size": 256}
    algo = Algorithm(example, rollout_fragment_length=64, **settings)
    try:
        results = [algo.train() for _ in range(6)]
        policies = algo.workers.local_worker.policies
        assert sorted(policies) == ["main", "opponent"] and sorted(
            algo.workers.learner.learners
        ) == ["main"]
        snapshot = results[4]  # every 5 iterations
        assert snapshot["selfplay/pool_size"] == 1 and 0 <= snapshot["selfplay/vs_random/win"] <= 1
        main, opponent = (policies[p].get_weights() for p in ("main", "opponent"))
        assert any(not np.array_equal(main[k], opponent[k]) for k in main)  # frozen since
        path = algo.save(str(tmp_path))
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert restored.train()["iteration"] == 7
        games = restored.evaluate(episodes=4)  # main in both seats (copy 0 of self_play)
        assert games["episodes"] == 4 and "agent/player_2/episode_return_mean" in games
    finally:
        restored.stop()


def test_a_multi_agent_checkpoint_loads_and_exports_each_policy(tmp_path):
    import onnxruntime
    from pettingzoo.classic import tictactoe_v3

    from flowrl import Algorithm, ConfigError, load_policy
    from flowrl.apps.cli import main

    algo = Algorithm("ppo", env=TICTACTOE, num_workers=0, policy_mapping="independent")
    algo.train()
    path = algo.save(str(tmp_path / "run"))
    current = load_policy(algo, policy_id="player_1")  # a notebook's, without a checkpoint
    with pytest.raises(ConfigError, match=r"the algorithm holds policies \['player_1'"):
        load_policy(algo)
    algo.stop()
    env = tictactoe_v3.env()
    env.reset(seed=0)
    obs = env.observe("player_1")
    move = load_policy(path, policy_id="player_1").compute_action(obs)
    assert obs["action_mask"][move] == 1 and current.compute_action(obs) == move
    names = r"holds policies \['player_1', 'player_2'\]: name one \(--policy-id"
    with pytest.raises(ConfigError, match=names):
        load_policy(path)
    out = tmp_path / "player_2.onnx"
    assert main(["export", str(path), "--out", str(out), "--policy-id", "player_2"]) == 0
    session = onnxruntime.InferenceSession(str(out))
    inputs = {"action_mask": obs["action_mask"][None], "observation": obs["observation"][None]}
    (actions,) = session.run(None, inputs)
    assert obs["action_mask"][int(actions[0])] == 1


def test_evaluation_videos_of_a_game_one_file_per_game(tmp_path):
    from flowrl import Algorithm, ConfigError

    settings = {"num_workers": 0, "evaluation_interval": 1, "evaluation_episodes": 2}
    videos = tmp_path / "videos"
    algo = Algorithm("ppo", env=TICTACTOE, evaluation_video_dir=str(videos), **settings)
    try:
        assert algo.train()["evaluation/episodes"] == 2
    finally:
        algo.stop()
    names = sorted(p.name for p in (videos / "iteration_000001").iterdir())
    assert names == ["eval-episode-0.mp4", "eval-episode-1.mp4"]
    poles = Algorithm("ppo", env=POLES, num_workers=0)
    try:
        with pytest.raises(ConfigError, match="cannot be recorded: it renders no rgb_array"):
            poles.workers.local_worker.evaluate(1, video_dir=str(tmp_path / "none"))
    finally:
        poles.stop()


@pytest.mark.slow
def test_a_game_is_shown_in_a_window_and_an_env_that_draws_none_is_refused(a_display):
    """``render=True`` for a multi-agent env: the creator gets render_mode="human" (a
    tic-tac-toe window shows a move a second)."""
    from flowrl import Algorithm, ConfigError

    with Algorithm("ppo", env=TICTACTOE, num_workers=0) as algo:
        assert algo.evaluate(1, render=True)["episodes"] == 1
    assert len(a_display) >= 5, "a frame per move, and a game has five at least"
    refused = pytest.raises(ConfigError, match="cannot be shown: it renders no human frames")
    with Algorithm("ppo", env=POLES, num_workers=0) as algo, refused:
        algo.evaluate(1, render=True)


def aec_poles():
    """IndependentCartPoles through PettingZoo's AEC API (parallelizable)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    return parallel_to_aec(IndependentCartPoles(agents=2))


def test_an_aec_env_that_pettingzoo_can_make_parallel_is_stepped_in_parallel():
    from flowrl.rollout.multi_agent import agent_env_maker

    make = agent_env_maker("test_multi_agent:aec_poles")
    assert not make.turn_based and hasattr(make(), "possible_agents")
    batch = worker_of(env="test_multi_agent:aec_poles", rollout_fragment_length=20).sample()
    assert len(batch) == 60 and len(batch["shared"]) > 60  # both agents' rows


def test_connect_four_plays_turn_by_turn_with_its_action_mask():
    batch = worker_of(env="pettingzoo.classic.connect_four_v3:env", rollout_fragment_length=50)
    rows = batch.sample()["shared"]
    assert rows["obs"].dtype.names == ("action_mask", "observation") and len(rows) > 100
    episodes, metrics, _ = batch.get_metrics()
    assert episodes and metrics["illegal_moves"] == 0
    assert all(sorted(ep.agents.values()) in ([-1.0, 1.0], [0.0, 0.0]) for ep in episodes)


@pytest.mark.slow
def test_the_ported_rllib_two_trainer_workflow_trains_both_policies(tmp_path):
    """docs/migrating-from-rllib.md's port of RLlib 1.x's two_trainer_workflow runs as the
    page shows, and both of its policies train."""
    example = Path(__file__).parents[1] / "examples" / "two_trainer_workflow.py"
    page = (Path(__file__).parents[1] / "docs" / "migrating-from-rllib.md").read_text()
    shown = page.split("```python\n", 1)[1].split("```", 1)[0]
    assert shown.strip() in example.read_text()  # the page shows the file's plan
    run = ["train", f"{example}:plan", "--num-workers", "0", "--stop-iters", "8"]
    assert main([*run, "--no-progress", "--output", str(tmp_path / "run")]) == 0
    rows = [json.loads(r) for r in (tmp_path / "run" / "result.jsonl").read_text().splitlines()]
    assert "policy/ppo_policy/policy_loss" in rows[-1] and "policy/dqn_policy/loss" in rows[-1]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("CartPolesWithAStranger", "gave agent 'stranger', which is not among its possible"),
        ("CartPolesThatForget", "left agent 'cartpole_1' without an observation"),
    ],
)
def test_an_env_that_breaks_the_parallel_api_is_one_line_naming_the_agent(env, message):
    """The stranger's reward was dropped and the forgotten agent acted on its last
    observation, silently."""
    from flowrl import ConfigError

    algo = Algorithm("ppo", env=f"fault_envs:{env}", num_workers=0)
    try:
        with pytest.raises(ConfigError, match=message):
            algo.train()
    finally:
        algo.stop()


def test_a_multi_agent_runs_summary_and_last_line_give_each_agents_return(tmp_path, capsys):
    """A game's summed return is 0 whoever wins: tic-tac-toe's last line read 0.0 alone."""
    args = ["train", "ppo", "--env", TICTACTOE, "--stop-iters", "1", "--num-workers", "0"]
    assert main([*args, "--no-progress", "--output", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    seats = [summary[f"agent/{p}/episode_return_mean"] for p in ("player_1", "player_2")]
    assert seats[0] == pytest.approx(-seats[1]) and summary["episode_return_mean"] == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert f"(best 0.0; by agent player_1 {seats[0]:.1f}, player_2 {seats[1]:.1f})" in last
