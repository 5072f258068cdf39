"""How a variant becomes stages: the stage-kind table, the plan, every name and tag, the rendered Dockerfiles and
the committed copies' drift check. Imports `matrix` and `inputs`."""
