"""trace: the records that cross stages and the run directory that holds them. events is the schema
(StepRecord, SemanticEvent, Hypothesis, Report); writer appends meta.json, events.jsonl, stats.jsonl and
model.json crash-safely; reader and job read them back, tolerant of a cut last line, for one process or every
rank of a job.

Imports no torch and no other stage: the reasoner replays a trace on a machine without torch."""
