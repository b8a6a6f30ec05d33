"""Rule errors and what their author is told: shared by the CLI and MCP tests."""

from __future__ import annotations

#: (expression, what the author is told after "expression does not compile: ")
COMPILE_ERRORS = [
    (
        ".kind ==",
        "syntax error, unexpected end of the expression at line 1, column 9:\n"
        "    .kind ==\n"
        "            ^",
    ),
    ("65 | ascii", "ascii/0 is not defined at line 1, column 6:\n    65 | ascii\n         ^^^^^"),
    (
        ".a |\n  foo(1)",
        "foo/1 is not defined at line 2, column 3:\n      foo(1)\n      ^^^",
    ),
    (
        '.kind == "push" and {b: }',
        "syntax error, unexpected '}' at line 1, column 25:\n"
        '    .kind == "push" and {b: }\n'
        "                            ^",
    ),
    # a string left open runs into the wrapper: told where it starts, never the wrapper's
    # tokens (jq's "expecting '|' or ',' or ')'" was the wrapper's own)
    ('"', 'syntax error: unterminated string starting at line 1, column 1:\n    "\n    ^'),
    (
        '.a | "x',
        'syntax error: unterminated string starting at line 1, column 6:\n    .a | "x\n         ^',
    ),
    (
        '"abc\\',
        'syntax error: unterminated string starting at line 1, column 1:\n    "abc\\\n    ^',
    ),
    (
        '"\\(.a)',
        'syntax error: unterminated string starting at line 1, column 1:\n    "\\(.a)\n    ^',
    ),
    (  # the innermost string left open: the one inside the interpolation
        '"\\("x',
        'syntax error: unterminated string starting at line 1, column 4:\n    "\\("x\n       ^',
    ),
    (  # a quote in a comment is no string; the rule's second line has the open one
        '.a # "\n  | "x',
        'syntax error: unterminated string starting at line 2, column 5:\n      | "x\n        ^',
    ),
    (  # an error before the open string is told as jq tells it
        '.a +* "x',
        "syntax error, unexpected '*' at line 1, column 5:\n    .a +* \"x\n        ^",
    ),
]

#: (expression whose brackets do not nest, what its author is told): the bracket at fault,
#: found before any compile; a string left open (it swallowed the closers) is told first.
BRACKET_ERRORS = [
    ("(", "syntax error: unclosed '(' at line 1, column 1:\n    (\n    ^"),
    ("{", "syntax error: unclosed '{' at line 1, column 1:\n    {\n    ^"),
    (".a[", "syntax error: unclosed '[' at line 1, column 3:\n    .a[\n      ^"),
    (
        "reduce . as $x (0",
        "syntax error: unclosed '(' at line 1, column 16:\n"
        "    reduce . as $x (0\n"
        "                   ^",
    ),
    (
        "(.a |\n  {b: (.c)",
        "syntax error: unclosed '{' at line 2, column 3:\n      {b: (.c)\n      ^",
    ),
    (".a | .b)", "syntax error: unexpected ')' at line 1, column 8:\n    .a | .b)\n           ^"),
    ("[.a)", "syntax error: unexpected ')' at line 1, column 4:\n    [.a)\n       ^"),
    (
        '.a | ("x)',
        "syntax error: unterminated string starting at line 1, column 7:\n"
        '    .a | ("x)\n'
        "          ^",
    ),
]

#: The wrapper's own names: jq would refuse each as undefined, and so does a save.
WRAPPER_NAMES = [
    ("$__e.payload.a == 1", "$__e"),
    ("$__s == 0", "$__s"),
    ("true, break $__l", "$__l"),
]

#: (a bad action, what its rule's author is told after the rule's label): the deepest
#: failing field of the action's oneOf and what it expected, never a Python dict.
ACTION_ERRORS = [
    ({"queue": "inbox", "exclusive": "yes"}, "action.exclusive must be a boolean (got a string)"),
    ({"queue": "inbox", "once": 3}, "action.once must be a boolean (got an integer)"),
    ({"queue": "", "work_order": True}, "action.queue must not be empty"),
    ({"queue": "inbox", "endpoints": []}, "action.endpoints must not be empty"),
]

_EXPR_ABSENT = object()

#: (the rule's expr, or EXPR_ABSENT for none, what its author is told after the label)
EXPR_ERRORS: list[tuple[object, str]] = [
    (_EXPR_ABSENT, "expr is missing"),
    (42, "expr must be a string (got a number)"),
    (["true"], "expr must be a string (got a list)"),
    ("   ", "expr is empty"),
]
EXPR_ABSENT = _EXPR_ABSENT
