"""`invoke bench`: build and start-up figures measured in one run (run.py), the fleet figure (fleet.py)."""
