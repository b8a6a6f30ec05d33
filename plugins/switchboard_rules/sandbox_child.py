"""The sandbox's fork server and zygotes: the only processes that ever run tenant jq.

Process tree (one process group, the fork server is a child subreaper)::

    fork server   imports jq, forks one zygote per rule set and webhook (LRU, and evicted
                  while the tree's memory is over its budget), never runs tenant jq
    └── zygote    RLIMIT_AS, compiles its rule set once (after proving it safe, and small
                  enough, in forked trials under one deadline)
        └── evaluator, started ahead of need and reused for many evaluations: SIGALRM
            hard stop (the default action: the process dies) for a sweep of all the rules,
            or per rule when going rule by rule; one answer per envelope

Every message these processes exchange with the server, and with each other, is defined
in :mod:`.protocol`. The server starts this module without importing its package (see
``pool._BOOTSTRAP``): nothing here may import the host or the plugin's hooks.

The mechanisms live in :mod:`.child`, one a module: :mod:`.child.program` (the jq program
over the rules), :mod:`.child.ruleset` (compiling a rule set after its trials),
:mod:`.child.sweep` (every rule under one alarm), :mod:`.child.evaluate` (the evaluator, rule
by rule) and :mod:`.child.loop` (the fork server's and the zygotes' loops, and :func:`main`).
"""

from __future__ import annotations

import sys

from .child.evaluate import evaluate_match, evaluate_one, evaluate_verdicts, evaluator
from .child.loop import ForkServer, Zygote, main, pss, tree_pss
from .child.program import PRELUDE, build_program, compile_program
from .child.ruleset import DEADLINE_MSG, LIMIT_MSG, RuleSet, resident, too_large, trial
from .child.sweep import sweep_match

__all__ = [
    "DEADLINE_MSG",
    "LIMIT_MSG",
    "PRELUDE",
    "ForkServer",
    "RuleSet",
    "Zygote",
    "build_program",
    "compile_program",
    "evaluate_match",
    "evaluate_one",
    "evaluate_verdicts",
    "evaluator",
    "main",
    "pss",
    "resident",
    "sweep_match",
    "too_large",
    "tree_pss",
    "trial",
]

if __name__ == "__main__":  # pragma: no cover
    main(sys.argv)
