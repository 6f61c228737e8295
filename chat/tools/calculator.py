"""The calculator tool: arithmetic over a parsed syntax tree, never `eval`.

The text is parsed with `ast.parse(mode="eval")` and walked by hand: numbers, the
operators + - * / // ** %, unary signs, parentheses and a whitelist of functions and
constants. Anything else (names, attributes, subscripts, lambdas, comprehensions, calls of
anything but a whitelisted name) is refused with a message saying what. Length, nesting,
exponents, result size and time are bounded, so `9**9**9` fails fast instead of hanging.

`^` is a power, as people write it outside Python, never XOR: it becomes `**` before parsing,
so it binds like `**`, from the right and tighter than a sign (`2^3^2` = 512, `-2^2` = -4).
"""

from __future__ import annotations

import ast
import math
import operator
import re
import time
from collections.abc import Callable
from typing import Any

MAX_CHARS = 200
MAX_DEPTH = 30
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 1e300
MAX_SECONDS = 0.05


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message says why."""


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "sin": math.sin, "cos": math.cos, "tan": math.tan, "log": math.log, "exp": math.exp,
    "pow": None,  # checked like ** (below)
    "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: None,  # type: ignore[dict-item]
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_REFUSED: dict[type, str] = {
    ast.Attribute: "attribute access", ast.Subscript: "subscripts", ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions", ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions", ast.Compare: "comparisons", ast.BoolOp: "boolean operators",
    ast.IfExp: "conditional expressions", ast.NamedExpr: "assignments", ast.Starred: "starred arguments",
    ast.List: "lists", ast.Tuple: "tuples", ast.Dict: "dicts", ast.Set: "sets", ast.JoinedStr: "strings",
}
_SYMBOLS = str.maketrans({"×": "*", "÷": "/", "^": "**", "（": "(", "）": ")", "−": "-", "，": ","})


def normalise(text: str) -> str:
    """Write the usual symbols (× ÷ ^ full-width brackets) as Python operators."""
    return text.translate(_SYMBOLS).strip()


def evaluate(text: str) -> float | int:
    """The value of an arithmetic expression; CalculatorError when it is refused or fails."""
    expression = normalise(text)
    if not expression:
        raise CalculatorError("The expression is empty.")
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"The expression is longer than {MAX_CHARS} characters.")
    if _nesting(expression) > MAX_DEPTH:
        raise CalculatorError(f"The expression is nested deeper than {MAX_DEPTH} levels.")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise CalculatorError(f"Not an arithmetic expression: {expression!r}.") from error
    return _Evaluator(time.perf_counter() + MAX_SECONDS).visit(tree.body, 0)


def format_number(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}" if isinstance(value, float) else str(value)


def _nesting(expression: str) -> int:
    depth = deepest = 0
    for char in expression:
        depth += (char == "(") - (char == ")")
        deepest = max(deepest, depth)
    return deepest


class _Evaluator:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def visit(self, node: ast.AST, depth: int) -> float | int:
        if depth > MAX_DEPTH:
            raise CalculatorError(f"The expression is nested deeper than {MAX_DEPTH} levels.")
        if time.perf_counter() > self.deadline:
            raise CalculatorError("The calculation takes too long.")
        if isinstance(node, ast.Constant):
            return self._number(node.value)
        if isinstance(node, ast.Name):
            if node.id in CONSTANTS:
                return CONSTANTS[node.id]
            raise CalculatorError(f"Unknown name {node.id!r}: only {', '.join(sorted(CONSTANTS))} are allowed.")
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _checked(_UNARY[type(node.op)](self.visit(node.operand, depth + 1)))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.visit(node.left, depth + 1), self.visit(node.right, depth + 1)
            if isinstance(node.op, ast.Pow):
                return _power(left, right)
            return _arithmetic(_BINARY[type(node.op)], left, right)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        what = _REFUSED.get(type(node), type(node).__name__)
        raise CalculatorError(f"Not allowed in a calculation: {what}.")

    def _number(self, value: Any) -> float | int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CalculatorError(f"Only numbers are allowed, not {type(value).__name__} values.")
        return _checked(value)

    def _call(self, node: ast.Call, depth: int) -> float | int:
        if not isinstance(node.func, ast.Name):
            what = _REFUSED.get(type(node.func), "calls of expressions")
            raise CalculatorError(f"Not allowed in a calculation: {what}.")
        name = node.func.id
        if name not in FUNCTIONS:
            raise CalculatorError(f"Unknown function {name!r}: allowed are {', '.join(sorted(FUNCTIONS))}.")
        if node.keywords:
            raise CalculatorError("Functions take positional arguments only.")
        args = [self.visit(arg, depth + 1) for arg in node.args]
        if name == "pow":
            if len(args) != 2:
                raise CalculatorError("pow takes two arguments.")
            return _power(*args)
        return _arithmetic(FUNCTIONS[name], *args)


def _power(base: float | int, exponent: float | int) -> float | int:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"The exponent {format_number(exponent)} is larger than {MAX_EXPONENT}.")
    if base and abs(exponent) * math.log10(abs(base) or 1) > 300:
        raise CalculatorError("The result is too large.")
    return _arithmetic(operator.pow, base, exponent)


def _arithmetic(function: Callable[..., Any], *args: float | int) -> float | int:
    try:
        result = function(*args)
    except ZeroDivisionError as error:
        raise CalculatorError("Division by zero.") from error
    except (ValueError, OverflowError, TypeError) as error:
        raise CalculatorError(f"Cannot compute: {error}.") from error
    if isinstance(result, complex):
        raise CalculatorError("The result is not a real number.")
    return _checked(result)


def _checked(value: float | int) -> float | int:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise CalculatorError("The result is not a finite number.")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError("The result is too large.")
    return value


# --- the tool: extraction from a message and the handler ---------------------------------------

_KEYWORDS = re.compile(
    r"请|帮我|计算一下|计算|算一下|算算|等于多少|等于几|的?结果是?|是多少|多少|\bplease\b|\bcalculate\b|\bcompute\b|"
    r"\bevaluate\b|\bwhat(?:'s| is)\b|\bhow much is\b|\bequals?\b|=",
    re.IGNORECASE,
)
# A greeting before the sum ("hello, what is 2+2?") is not part of it.
_GREETING = re.compile(
    r"^\s*(?:(?:hi|hello|hey)(?: there)?|good (?:morning|afternoon|evening)|你好|您好|嗨|哈喽)[\s,，!！.。~:：-]+",
    re.IGNORECASE,
)
# Only a run's first character may start the trailing run, so a run of spaces inside the
# message is read once, not once from each of its characters.
_TRAILING = re.compile(r"(?<![?？!！。:：\s])[?？!！。:：\s]+$")
_EXPRESSION = re.compile(r"^[\d\s.+\-*/%()a-z_,]+$", re.IGNORECASE)
_OPERATION = re.compile(
    r"(?:\d|\)|\b(?:" + "|".join(CONSTANTS) + r")\b)\s*(?:\*\*|[-+*/%])\s*[\d(a-z]|\b(?:"
    + "|".join(FUNCTIONS) + r")\s*\(",
    re.IGNORECASE,
)


# A number starts where no digit precedes it, and is taken whole (what follows one is never a
# digit or a dot-and-digits): otherwise every digit of a long run starts a try that reads to
# the run's end, quadratic in the run, with the GIL held.
_NUMBER = r"(?<!\d)(\d++(?:\.\d++)?+)"
# Arithmetic said in words ("15% of 200", "2的10次方", "3 乘以 4"), written as operators.
SPOKEN: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), replacement)
    for pattern, replacement in (
        (rf"{_NUMBER}\s*+%\s*+of\s*+{_NUMBER}", r"(\1/100*\2)"),
        (rf"{_NUMBER}\s*+的\s*+{_NUMBER}\s*+%", r"(\2/100*\1)"),
        (rf"{_NUMBER}\s*+的\s*+{_NUMBER}\s*+次方", r"\1**\2"),
        # Not "\s*的?\s*": two runs of spaces side by side split a long run every way there is.
        (rf"{_NUMBER}\s*+(?:的\s*+)?平方|{_NUMBER}\s*+squared\b", r"\1\2**2"),
        (rf"{_NUMBER}\s*+(?:的\s*+)?立方|{_NUMBER}\s*+cubed\b", r"\1\2**3"),
        (r"\bto the power of\b", "**"), (r"\b(?:times|multiplied by)\b|乘以|乘", "*"),
        (r"\bdivided by\b|除以", "/"), (r"\bplus\b|加上|加", "+"), (r"\bminus\b|减去|减", "-"),
    )
)


def extract(message: str) -> dict[str, Any] | None:
    """`{"expression": ...}` when the message, less question words, is one calculation."""
    text = _GREETING.sub("", message)
    text = normalise(text)
    for pattern, replacement in SPOKEN:
        text = pattern.sub(replacement, text)
    text = _KEYWORDS.sub(" ", text)
    text = _TRAILING.sub("", text).strip().rstrip(".")
    if not text or not _EXPRESSION.match(text) or not _OPERATION.search(text):
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError):  # "1+1+…" of a few thousand terms is too deep
        return None
    return {"expression": " ".join(text.split())} if _is_arithmetic(tree) else None


def _is_arithmetic(tree: ast.Expression) -> bool:
    """Whether the tree is one value whose names are whitelisted functions, called, or constants.

    "bm25 + vector" or "1/(60 + rank)" parse, but they are formulas from the documents, not
    calculations; sending them to the calculator would answer a KB question with a refusal.
    """
    if isinstance(tree.body, ast.Tuple):
        return False
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return all(
        node.id in (FUNCTIONS if id(node) in called else CONSTANTS)
        for node in ast.walk(tree)
        if isinstance(node, ast.Name)
    )


def handle(parameters: dict[str, Any]) -> str:
    expression = str(parameters.get("expression", ""))
    try:
        return f"{normalise(expression)} = {format_number(evaluate(expression))}"
    except CalculatorError as error:
        return f"The calculator refused {expression[:80]!r}: {error}"


PARAMETERS = {
    "type": "object",
    "properties": {"expression": {"type": "string", "maxLength": MAX_CHARS, "description": "e.g. 3*(4+5)"}},
    "required": ["expression"],
}
