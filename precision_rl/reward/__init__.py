"""The paper's math reward: answer extraction per template, answer equivalence, and a fast batch grader.

``grader.grade`` is the entry point; ``precision_rl/verl_ext/score.py`` wraps it for verl's custom reward hook.
"""
