"""Preflight: the costly mistakes caught offline, with numbers, before anything is bought.

Each rule is a small class (`base.Rule`) with a stable code (`codes.py` gives its level and
summary); `report.run` applies them all to one compiled plan, marks the findings the blueprint
waives, and prices the cluster (`rackform.plan.cost`).
"""
