"""probe: the torch side. Global module, optimizer and backward hooks (hooks.Probe) find the root models
(rootfinder, registry, roots), pace training steps (stepclock, pacer, optimizers, backward), read what a
sampled step says (observer, gradreader, paramsets and the architecture readers archreader, normprobe,
lossprobe, attnprobe, residprobe) as 0-d device tensors (tensorstats), and send them to the host once per step
as StepRecords (records). guard keeps every failure inside neuraldbg out of the user's training; hookset
undoes every hook and patch.

May import trace (the records it fills) and the shared modules (errors, config, vocab); never reason,
render, verify or launch."""
