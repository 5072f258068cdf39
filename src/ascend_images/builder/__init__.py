"""Building a plan on a BuildKit builder: the engine connection and its floor, one bake of the written workspace,
its progress, logs and report, and the engine's faults worked around (quirks). Imports `matrix`, `inputs` and
`stages`."""
