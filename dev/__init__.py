"""Maintainers' tasks, run from a checkout through tasks.py and never installed: the benchmark (`invoke bench`) and
the record of what CI costs (`invoke ci-costs`)."""
