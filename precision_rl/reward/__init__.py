"""The paper's math reward: answer extraction per template, answer equivalence, and the two graders the authors'
frameworks used (oat's, the default, and the VeRL fork's), fast and time-limited.

``grader.grade`` is the entry point; ``precision_rl/verl_ext/score.py`` wraps it for verl's custom reward hook.
"""
