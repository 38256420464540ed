"""verify: re-run the recorded command with each suggested fix and judge which cure the run. runner plans the
trials and judges them, trialrun runs each as its own process group; inside that process trial applies what
the trial asks for: the fix (fixes, torch side), seeds, and the write guard (writeguard) that keeps the
user's files untouched.

May import reason (the hypotheses it verifies), probe (hook discipline), trace and the shared modules; never
launch."""
