"""Answer-string normalisations used by the paper's grader (oat ``math_grader``, after Hendrycks et al.).

Two independent normal forms, as in the paper's grader:
- ``mathd_normalize``: the MATH-dataset (Hendrycks) canonical string; two answers match when their forms are equal.
- ``prm_normalize``: the PRM800K form fed to sympy (LaTeX turned into plain text, lower case, no braces).
"""

from __future__ import annotations

import re

# Unit words stripped from answers (MathQA-style units as the paper's grader strips; single letters are left
# alone because they are usually variables). Plural forms are added below.
UNIT_WORDS = (
    "degree", "deg", "mph", "kmph", "kmh", "ft", "sq m", "mile", "inch", "inches", "feet", "foot", "yard", "meter",
    "metre", "cm", "mm", "km", "kg", "gm", "gram", "lb", "pound", "gallon", "liter", "litre", "hour", "hr",
    "minute", "min", "second", "sec", "day", "week", "month", "year", "yr", "percent", "unit", "cubic", "square",
    "cent", "dollar", "rupee", "rs", "hectare", "acre", "ohm", "men", "women", "apple", "coin", "toy",
)
_UNIT_RE = [re.compile(r"(^|\W)" + re.escape(u) + r"s?($|\W)") for u in sorted(UNIT_WORDS, key=len, reverse=True)]
_TEXT_WRAPPED = re.compile(r"^\\text\{(?P<text>.+?)\}$")


def _fix_fracs(s: str) -> str:
    r"""Return ``s`` with brace-less fractions completed: ``\frac12`` → ``\frac{1}{2}``, ``\frac1{7}`` → ``\frac{1}{7}``."""
    head, *parts = s.split("\\frac")
    out = head
    for part in parts:
        out += "\\frac"
        if part.startswith("{"):
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, rest = part[0], part[1], part[2:]
        out += "{" + a + "}" + ("{" + b + "}" + rest if b != "{" else b + rest)
    return out


def _fix_sqrt(s: str) -> str:
    r"""Return ``s`` with ``\sqrt3`` written as ``\sqrt{3}``."""
    if "\\sqrt" not in s:
        return s
    head, *parts = s.split("\\sqrt")
    return head + "".join("\\sqrt" + (p if p.startswith("{") or not p else "{" + p[0] + "}" + p[1:]) for p in parts)


def _fix_slash(s: str) -> str:
    r"""Return ``a/b`` with integer a, b as ``\frac{a}{b}``; anything else unchanged."""
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}" if m else s


def _drop_trailing_text(s: str) -> str:
    r"""Return ``s`` cut before its first ``\text{`` when ``s`` ends in ``}`` (a trailing unit such as ``5\text{ cm}``).

    The same cut as ``re.sub(r"\\text\{.*?\}$", "", s)``, in linear time (that lazy pattern rescans the rest of the
    string from every ``\text{``), then stripped; a result that would be empty keeps ``s``.
    """
    start = s.find("\\text{")
    cut = s[:start] if start >= 0 and s.endswith("}") else s
    return cut.strip() or s


def _strip_units(s: str) -> str:
    for _ in range(2):
        for pattern in _UNIT_RE:
            stripped = pattern.sub(r"\1\2", s)
            if stripped:
                s = stripped
    return s


def mathd_normalize(answer: str | None) -> str | None:
    r"""Return the Hendrycks (MATH) canonical form of ``answer`` (None stays None).

    Drops an enclosing ``\text{}``, line breaks, ``\!``, ``\left``/``\right``, trailing ``\text{...}`` units and unit
    words, degrees, ``\$`` and ``\%``, spaces, and a short ``x =`` prefix; maps ``dfrac``/``tfrac`` to ``frac``,
    ``\frac12`` to ``\frac{1}{2}``, ``a/b`` to ``\frac{a}{b}``, ``.5`` to ``0.5`` and ``0.5`` to ``\frac{1}{2}``.
    """
    if answer is None:
        return None
    s = answer.strip()
    m = _TEXT_WRAPPED.search(s)
    if m:
        s = m.group("text").strip()
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = re.sub(r"\\begin\{array\}\{[^}]*\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "")
    s = _drop_trailing_text(s)
    s = _strip_units(s)
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    if "\\text{ " in s and len(s.split("\\text{ ")) == 2:
        s = s.split("\\text{ ")[0]
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    lhs_rhs = s.split("=")
    if len(lhs_rhs) == 2 and len(lhs_rhs[0]) <= 2:
        s = lhs_rhs[1]
    s = _fix_sqrt(s).replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_slash(s)


# --- PRM800K form (what the sympy check compares) ---------------------------------------------------------------

_PRM_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month",
              "year", "foot", "feet", "inch", "yard")
_PRM_UNIT_RE = re.compile("(" + "|".join(_PRM_UNITS) + r")(es)?(s)? *(\^[0-9]+)?")
_THOUSANDS = re.compile(r"(\d)(,)(\d\d\d)($|\D)")


def strip_thousands(expr: str) -> str:
    """Return ``expr`` without thousands separators (``1,000,000`` → ``1000000``); tuple commas are kept."""
    while True:
        nxt = _THOUSANDS.sub(r"\1\3\4", expr)
        if nxt == expr:
            return nxt
        expr = nxt


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def str_is_int(text: str) -> bool:
    """Return whether ``text`` (thousands separators allowed) is a number with an integer value."""
    try:
        value = float(strip_thousands(text))
    except ValueError:
        return False
    return value == value and abs(value) != float("inf") and abs(value - round(value)) <= 1e-7


def latex_to_text(expr: str) -> str:
    """Return LaTeX ``expr`` as the plain text sympy's parser reads (``\\sqrt{2}`` → ``sqrt(2)``-ish, π → pi)."""
    from pylatexenc import latex2text

    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for old, new in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        expr = expr.replace(old, new)
    return expr.strip()


def prm_normalize(expr: str | None) -> str | None:
    """Return the PRM800K normal form of ``expr``: plain text, no units/``$``/``%``/braces/spaces, lower case."""
    if expr is None:
        return None
    m = _TEXT_WRAPPED.search(expr)
    if m:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    expr = _PRM_UNIT_RE.sub("", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr[:1] == "{" and expr[-1:] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if _is_float(expr) and str_is_int(expr):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        try:
            expr = latex_to_text(expr)
        except Exception:  # noqa: BLE001 - pylatexenc fails on malformed LaTeX; keep the raw text then
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", r"\1+\2", expr)  # mixed numbers: 7 3/4 → 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if str_is_int(expr):
        expr = str(int(float(strip_thousands(expr))))
    return expr
