"""The three equivalence checks of the paper's grader: Hendrycks string match, sympy, and math-verify.

``mathd_equal`` is cheap; ``sympy_equal`` and ``math_verify_equal`` may be slow and are run by the grader under a
time limit (see ``precision_rl.reward.timeout``). All three return a bool and never raise on bad input.
"""

from __future__ import annotations

import logging
import re
import zlib

from precision_rl.reward.normalize import mathd_normalize, prm_normalize, str_is_int, strip_thousands

# sympy can hang on huge powers; the PRM800K grader refuses to evaluate these, and so do we.
_BAD_SUBSTRINGS = ("^{", "^(")
_BAD_REGEXES = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
_TUPLE_CHARS = "()[]"
_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")


def mathd_equal(pred: str, truth: str) -> bool:
    """Return whether the Hendrycks canonical forms of ``pred`` and ``truth`` are equal."""
    a, b = mathd_normalize(pred), mathd_normalize(truth)
    return a is not None and a == b


def _sympy_parse(expr: str):
    from sympy.parsing import sympy_parser

    return sympy_parser.parse_expr(
        expr.replace("^", "**"),
        transformations=sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,),
    )


def _may_evaluate(expr: str) -> bool:
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2:
        return False
    return not any(s in expr for s in _BAD_SUBSTRINGS) and not any(r.search(expr) for r in _BAD_REGEXES)


def _sympy_zero_difference(truth: str, pred: str) -> bool:
    import sympy

    expr = f"({truth})-({pred})"
    if not _may_evaluate(expr):
        return False
    try:
        return sympy.simplify(_sympy_parse(expr)) == 0
    except Exception:  # noqa: BLE001 - sympy raises many types on unparseable text: not equal
        return False


def split_tuple(expr: str) -> list[str]:
    """Return the elements of a tuple or interval ``(a,b)``/``[a,b)``; anything else is one element."""
    expr = strip_thousands(expr)
    if not expr:
        return []
    if (len(expr) > 2 and expr[0] in _TUPLE_CHARS and expr[-1] in _TUPLE_CHARS
            and all(ch not in expr[1:-1] for ch in _TUPLE_CHARS)):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def sympy_equal(pred: str, truth: str) -> bool:
    """Return whether ``pred`` equals ``truth`` under the PRM800K rules (normal form, then sympy per element).

    Intervals must agree on their brackets; unreduced fractions and integer-vs-non-integer are compared as strings.
    """
    gt, given = prm_normalize(truth), prm_normalize(pred)
    if gt is None or given is None:
        return False
    if gt == given:
        return True
    if not given:
        return False
    gt_elems, given_elems = split_tuple(gt), split_tuple(given)
    if len(gt_elems) > 1 and (gt[0] != given[0] or gt[-1] != given[-1]):
        return False
    if len(gt_elems) != len(given_elems):
        return False
    for t, g in zip(gt_elems, given_elems, strict=True):
        if _FRACTION.search(t) and _FRACTION.search(g):
            ok = t == g
        elif str_is_int(t) != str_is_int(g):
            ok = False
        else:
            ok = _sympy_zero_difference(t, g)
        if not ok:
            return False
    return True


def _repetitive(text: str) -> bool:
    """Return whether a long ``text`` is mostly repeats of itself (degenerate output math-verify can choke on)."""
    if len(text) <= 128:
        return False
    blob = text.encode()
    return len(zlib.compress(blob)) < 0.2 * len(blob)


def _mv_parse(text: str):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    if "$" not in text:
        text = f"${text}$"
    return parse(text, extraction_config=(LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()),
                 fallback_mode="no_fallback", extraction_mode=["first_match"], parsing_timeout=None)


def math_verify_equal(pred: str, truth: str) -> bool:
    """Return whether math-verify proves ``pred`` equal to ``truth`` (after a PRM normal-form shortcut)."""
    from math_verify import verify

    try:
        if _repetitive(pred) or _repetitive(truth):
            return False
        gt_norm = prm_normalize(truth)
        if gt_norm is None:
            return False
        if gt_norm == prm_normalize(pred):
            return True
        return bool(verify(_mv_parse(truth), _mv_parse(pred), timeout_seconds=None))
    except Exception:  # noqa: BLE001 - math-verify raises on odd LaTeX: not equal
        return False


_WARM = False


def warm_up() -> None:
    """Import sympy, math-verify and pylatexenc and run each check once, so that no time limit pays for imports."""
    global _WARM
    if _WARM:
        return
    sympy_equal("x^2+2x+1", "(x+1)^2")
    math_verify_equal("\\frac{1}{2}", "0.5")
    _WARM = True


# math-verify warns once per process that we handle timeouts ourselves; we do.
logging.getLogger("math_verify").setLevel(logging.ERROR)
