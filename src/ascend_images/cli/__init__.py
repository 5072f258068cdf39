"""The command line: the console program, the flag tables, and the task bodies by area (build, run, release, inputs;
bench, lint and readme)."""
