"""The paper's grader on real MATH500/AMC/AIME answers, their equivalent forms, and the format rules."""

import pytest

from precision_rl.paths import shared_data_dir
from precision_rl.reward.grader import GradeResult, answers_equal, grade, grade_batch


def shared_eval_answers() -> dict[str, list]:
    """Return the answers of the shared evaluation suite per split, or skip when that folder is absent."""
    path = shared_data_dir() / "evaluation_suite"
    if not (path / "dataset_dict.json").is_file():
        pytest.skip(f"shared evaluation suite not found at {path} (set PRECISION_RL_SHARED_DATA)")
    from datasets import load_from_disk

    suite = load_from_disk(str(path))
    return {split: list(suite[split]["answer"]) for split in ("math", "aime", "amc")}

# (ground truth exactly as in the shared MATH500 copy, an equivalent answer, a wrong answer)
MATH500_CASES = [
    (r"\dfrac{17}{50}", "0.34", "0.35"),
    (r"\dfrac{17}{50}", "17/50", r"\frac{17}{49}"),
    (r"\dfrac{33}{100}", r"\frac{33}{100}", r"\frac{1}{3}"),
    (r"\frac{14}{3}", r"4\frac{2}{3}", "4.6667"),
    (r"\frac{3}{2}", "1.5", "1.4"),
    (r"\frac{3}{56}", r"\dfrac{3}{56}", r"\frac{3}{65}"),
    (r"\frac{243}{625}", r"\tfrac{243}{625}", r"\frac{243}{626}"),
    (r"\frac{35}{64}", "35/64", r"\frac{35}{63}"),
    (r"\frac{3\sqrt{3}}{4}", r"\frac{3}{4}\sqrt{3}", r"\frac{3\sqrt{3}}{2}"),
    (r"-\frac{\pi}{6}", r"-\pi/6", r"\frac{\pi}{6}"),
    (r"\frac{20000}{\pi}", r"20000/\pi", r"20000\pi"),
    (r"\text{(C)}", "C", r"\text{(D)}"),
    (r"\text{(C)}", "(C)", "(B)"),
    (r"\text{(E)}", r"\text{(E)}", "E)"),
    (r"\text{(B)}", "B", "A"),
    (r"90^\circ", "90", "45"),
    (r"145^\circ", r"145^{\circ}", r"135^\circ"),
    (r"120^\circ", "120 degrees", "60"),
    (r"30^\circ", "30", "-30"),
    ("(3,4]", "(3, 4]", "(3,4)"),
    (r"(2,\infty)", r"(2, \infty)", r"[2,\infty)"),
    (r"(-\infty, 0]", r"(-\infty,0]", r"(-\infty,0)"),
    (r"(-\infty, 2) \cup (3, \infty)", r"(-\infty,2)\cup(3,\infty)", r"(-\infty,3)\cup(2,\infty)"),
    ("(-2,1)", "(-2, 1)", "(2,-1)"),
    ("(6,31,-1)", "(6, 31, -1)", "(6,31,1)"),
    ("x=5", "5", "x=6"),
    ("y = 2x + 3", "2x+3", "y=2x-3"),
    ("58,500", "58500", "58,000"),
    (r"\$32,\!348", "32348", "32,349"),
    (r"\$32,\!348", "32,348", "3234.8"),
    (r"\$18.90", "18.9", "18.09"),
    (r"\$36", "36", "63"),
    ("3.21", "3.210", "3.12"),
    ("326.5", r"\frac{653}{2}", "326"),
    ("4.5", r"\frac{9}{2}", "4"),
    (r"11\sqrt2", r"11\sqrt{2}", r"11\sqrt3"),
    (r"70 \sqrt{2}", r"70\sqrt{2}", r"7\sqrt{20}0"),
    (r"\sqrt{51}", r"\sqrt{51}", r"\sqrt{52}"),
    (r"3\sqrt{13}", r"\sqrt{117}", r"3\sqrt{31}"),
    (r"1 \pm \sqrt{19}", r"1\pm\sqrt{19}", r"1\pm\sqrt{91}"),
    (r"288 \pi", r"288\pi", r"28.8\pi"),
    (r"18+2\pi", r"2\pi+18", r"18+\pi"),
    (r"\pi", r"\pi", "3.14"),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})", r"(3, \pi)"),
    ("5x - 7y + 11z + 4 = 0", "5x-7y+11z+4=0", "5x-7y+11z-4=0"),
    (r"\text{east}", "east", "west"),
    (r"\text{even}", "even", r"\text{odd}"),
    ("p - q", "p-q", "q-p"),
]
# AIME answers are zero-padded three-digit strings; AMC answers are stored as floats.
AIME_CASES = [("025", "25", "52"), ("204", "204", "240"), ("809", "809.0", "808")]
AMC_CASES = [(142.0, "142", "141"), (8178.0, "8,178", "8187"), (-4.0, "-4", "4"), (1296.0, "1296.0", "1269")]
ALL_CASES = MATH500_CASES + AIME_CASES + AMC_CASES


def r1(answer: str) -> str:
    return f"Let me work it out step by step.\n</think>\n\nSo the answer is $\\boxed{{{answer}}}$."


def test_enough_real_cases():
    assert len(ALL_CASES) * 2 >= 60


@pytest.mark.parametrize(("truth", "equivalent", "wrong"), ALL_CASES)
def test_equivalent_form_is_correct_and_wrong_answer_is_not(truth, equivalent, wrong):
    good, bad = grade(r1(equivalent), truth, "r1_distill_qwen"), grade(r1(wrong), truth, "r1_distill_qwen")
    assert (good.score, good.acc, good.pred, good.formatted) == (1.0, True, equivalent, True)
    assert (bad.score, bad.acc, bad.formatted) == (0.0, False, True)


def test_cases_are_real_answers_from_the_shared_copy():
    answers = shared_eval_answers()
    for split, cases in (("math", MATH500_CASES), ("aime", AIME_CASES), ("amc", AMC_CASES)):
        real = set(answers[split])
        missing = [t for t, _, _ in cases if t not in real]
        assert not missing, f"not in the shared {split} answers: {missing}"


def test_every_aime_and_amc_answer_accepts_itself_and_rejects_a_neighbour():
    answers = shared_eval_answers()
    truths = list(answers["aime"]) + list(answers["amc"])
    responses = [r1(str(int(float(t)))) for t in truths] + [r1(str(int(float(t)) + 1)) for t in truths]
    results = grade_batch(responses, truths + truths, "r1_distill_qwen")
    n = len(truths)
    assert all(r.acc for r in results[:n])
    assert not any(r.acc for r in results[n:])


def test_math500_answers_accept_themselves_and_reject_other_problems_answers():
    truths = sorted(set(shared_eval_answers()["math"]))
    assert all(answers_equal(t, t) for t in truths)
    # Pair each answer with a different one (every 7th, to stay cheap); distinct MATH500 answers are not equivalent
    # except where they are the same value written differently, which we list from the data itself.
    sample = truths[::7]
    wrong = [(a, b) for a, b in zip(sample, sample[1:] + sample[:1], strict=True)]
    accepted = [(a, b) for a, b in wrong if answers_equal(a, b)]
    assert not accepted


FORMAT_CASES = [
    # (response, template, ground truth, expected GradeResult)
    ("no think tag \\boxed{4}", "r1_distill_qwen", "4", GradeResult(0.0, False, None, False)),
    ("a</think>b</think>\\boxed{4}", "r1_distill_qwen", "4", GradeResult(0.0, False, None, False)),
    ("\\boxed{4} early </think> then nothing boxed", "r1_distill_qwen", "4", GradeResult(0.0, False, None, False)),
    ("</think> \\boxed{3} then \\boxed{4}", "r1_distill_qwen", "4", GradeResult(1.0, True, "4", True)),
    ("</think> \\boxed{4} then \\boxed{3}", "r1_distill_qwen", "4", GradeResult(0.0, False, "3", True)),
    ("</think> \\boxed{\\frac{\\sqrt{3}}{2}}", "r1_distill_qwen", "\\frac{\\sqrt3}{2}",
     GradeResult(1.0, True, "\\frac{\\sqrt{3}}{2}", True)),
    ("</think> \\boxed{\\frac{1}{2}", "r1_distill_qwen", "\\frac12", GradeResult(0.0, False, None, False)),
    ("</think> \\fbox{7}", "r1_distill_qwen", "7", GradeResult(1.0, True, "7", True)),
    ("</think> so $\\boxed 7$.", "r1_distill_qwen", "7", GradeResult(1.0, True, "7", True)),
    ("Reasoning... \\boxed{12}", "qwen_math", "12", GradeResult(1.0, True, "12", True)),
    ("Reasoning, no box: 12", "qwen_math", "12", GradeResult(0.0, False, None, False)),
    ("reason </think> <answer> 12 </answer>", "r1", "12", GradeResult(1.0, True, "12", True)),
    ("reason </think> <answer> \\boxed{12} </answer>", "r1", "12", GradeResult(1.0, True, "12", True)),
    ("reason </think><answer>12</answer>", "r1", "12", GradeResult(0.0, False, None, False)),
    ("reason </think> <answer> 12", "r1", "12", GradeResult(0.0, False, None, False)),
]


@pytest.mark.parametrize(("response", "template", "truth", "expected"), FORMAT_CASES)
def test_format_rules(response, template, truth, expected):
    assert grade(response, truth, template) == expected


def test_truncated_response_scores_zero_even_when_right():
    assert grade(r1("4"), "4", "r1_distill_qwen", truncated=True).score == 0.0
    assert [r.score for r in grade_batch([r1("4")] * 2, ["4", "4"], "r1_distill_qwen", [True, False])] == [0.0, 1.0]


def test_list_ground_truth_accepts_any_listed_answer():
    assert grade(r1("9.6"), ["9.6\n", "9.60"], "r1_distill_qwen").acc
    assert grade(r1("0.5"), ["\\frac{1}{3}", "\\frac{1}{2}"], "r1_distill_qwen").acc
    assert not grade(r1("0.5"), [], "r1_distill_qwen").acc


def test_unknown_template_is_a_user_error():
    from precision_rl.errors import UserError

    with pytest.raises(UserError, match="unknown prompt template"):
        grade("x", "1", "llama")


def test_batch_lengths_must_match():
    with pytest.raises(ValueError):
        grade_batch(["a", "b"], ["1"], "qwen_math")


# Answers only math-verify accepts: oat's grader takes them, the VeRL fork's (no math-verify) does not.
MATH_VERIFY_ONLY = [(r"\{1,2\}", r"\{2,1\}"), ("10^{3}", "1000"), (r"\sin^2 x+\cos^2 x", "1")]


@pytest.mark.parametrize(("pred", "truth"), MATH_VERIFY_ONLY)
def test_fork_grader_has_no_math_verify_equivalences(pred, truth):
    # a generous limit for oat's side: what is tested is which checks run, not how fast they are on a busy machine
    assert grade(r1(pred), truth, "r1_distill_qwen", grader="oat", timeout_s=30.0).acc
    assert not grade(r1(pred), truth, "r1_distill_qwen", grader="fork").acc


def test_fork_grader_keeps_string_and_sympy_equivalences():
    for truth, equivalent, wrong in MATH500_CASES[:12]:
        assert grade(r1(equivalent), truth, "r1_distill_qwen", grader="fork").acc, (truth, equivalent)
        assert not grade(r1(wrong), truth, "r1_distill_qwen", grader="fork").acc, (truth, wrong)


def test_fork_grader_does_not_zero_truncated_responses():
    assert grade(r1("4"), "4", "r1_distill_qwen", truncated=True, grader="fork").score == 1.0
    assert grade(r1("5"), "4", "r1_distill_qwen", truncated=True, grader="fork").score == 0.0
    assert grade(r1("4"), "4", "r1_distill_qwen", truncated=True, grader="oat").score == 0.0


def test_fork_grader_needs_exactly_one_think_close():
    two = "a</think>b</think>\\boxed{4}"
    assert grade(two, "4", "r1_distill_qwen", grader="fork") == GradeResult(0.0, False, None, False)
    assert grade("no close \\boxed{4}", "4", "r1_distill_qwen", grader="fork").score == 0.0
    assert grade("x</think> \\boxed{3} then \\boxed{4}", "4", "r1_distill_qwen", grader="fork").acc


def test_graders_time_limits_are_those_of_their_sources():
    from precision_rl.reward.grader import GRADERS

    assert (GRADERS["oat"].timeout_s, GRADERS["fork"].timeout_s) == (1.0, 10.0)


def test_unknown_grader_is_a_user_error():
    from precision_rl.errors import UserError

    with pytest.raises(UserError, match="unknown grader 'verl'"):
        grade(r1("4"), "4", "r1_distill_qwen", grader="verl")


def test_verl_reward_hook_passes_the_grader():
    from precision_rl.verl_ext.score import compute_score

    fork = compute_score("d", r1("4"), "4", extra_info={"truncated": True}, grader="fork")
    oat = compute_score("d", r1("4"), "4", extra_info={"truncated": True})
    assert (fork["score"], oat["score"]) == (1.0, 0.0)
