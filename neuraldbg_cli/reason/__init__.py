"""reason: pure and replayable. The monitor runs each failure family's health state machines on StepRecords
(SemanticEvents out); the reasoner turns a run's events into ranked hypotheses with their evidence, causes and
fixes (fixspec: the fixes as data); crossrank merges the ranks of a distributed job. families/ holds one module
per failure family: its classifier, its rule, its advice.

Imports trace and the shared modules only; no torch."""
