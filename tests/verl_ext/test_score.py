"""The verl custom reward entry point, loaded the way verl 0.9.1 loads it (by file path, kwargs from the config)."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from precision_rl.launch.overrides import REWARD_FILE, REWARD_FUNCTION


@pytest.fixture(scope="module")
def verl_reward_fn():
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    def load(template: str):
        config = OmegaConf.create({"reward": {"custom_reward_function": {
            "path": str(REWARD_FILE), "name": REWARD_FUNCTION, "reward_kwargs": {"template": template}}}})
        return get_custom_reward_fn(config)

    return load


def test_verl_loads_the_file_and_scores_with_the_configured_template(verl_reward_fn):
    fn = verl_reward_fn("r1_distill_qwen")
    out = fn(data_source="aime24", solution_str="think</think> \\boxed{025}", ground_truth="25", extra_info={})
    assert out == {"score": 1.0, "acc": True, "pred": "025", "formatted": True}
    bad = fn(data_source="aime24", solution_str="no think tag \\boxed{25}", ground_truth="25", extra_info={})
    assert bad == {"score": 0.0, "acc": False, "pred": "", "formatted": False}


def test_r1_template_uses_answer_tags(verl_reward_fn):
    fn = verl_reward_fn("r1")
    out = fn(data_source="math500", solution_str="x </think> <answer> \\frac{1}{2} </answer>", ground_truth="0.5")
    assert out["score"] == 1.0
    assert fn(data_source="math500", solution_str="x </think> \\boxed{0.5}", ground_truth="0.5")["score"] == 0.0


def test_list_ground_truth_and_truncation_flag(verl_reward_fn):
    fn = verl_reward_fn("qwen_math")
    assert fn(data_source="minerva", solution_str="\\boxed{9.6}", ground_truth=["9.6\n"])["acc"] is True
    assert fn(data_source="minerva", solution_str="\\boxed{9.6}", ground_truth=["9.6"],
              extra_info={"truncated": True})["score"] == 0.0


def test_runs_in_verl_reward_threads(verl_reward_fn):
    """verl calls the reward from a thread pool: the sympy/math-verify checks then go to worker processes."""
    fn = verl_reward_fn("qwen_math")
    cases = [("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0), ("\\boxed{\\sqrt{117}}", "3\\sqrt{13}", 1.0),
             ("\\boxed{x^2+1}", "(x+1)^2", 0.0), ("\\boxed{\\frac{3}{4}\\sqrt{3}}", "\\frac{3\\sqrt{3}}{4}", 1.0)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        scores = list(pool.map(lambda c: fn(data_source="math500", solution_str=c[0], ground_truth=c[1])["score"],
                               cases))
    assert scores == [c[2] for c in cases]
