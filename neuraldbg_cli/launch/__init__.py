"""launch: the command line and everything around the user's process — running SCRIPT / -m MODULE exactly as
python would (scriptexec), the observed session (session) and the stages it wires together while the script
runs (wiring), torchrun jobs (joblaunch, distributed) and the console (live lines, the verdict).

The top of the stack: it may import every other stage; no stage imports it."""
