"""Building a plan on a Docker engine: the engine connection, the loopback build server, claims between
concurrent builds, progress and logs. Imports `matrix`, `inputs` and `stages`."""
