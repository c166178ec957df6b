"""Preflight: the costly mistakes caught offline, with numbers, before anything is bought.

Each rule is a small class (`base.Rule`) with a stable code and a level; `report.run` applies
them all to one effective blueprint, marks the findings the blueprint waives, and prices the
cluster (`rackform.cost`). This package imports nothing at import time so that the schema can
ask `registry.codes()` for the waivable codes without an import cycle.
"""
