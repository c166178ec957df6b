"""Preflight: the costly mistakes caught offline, with numbers, before anything is bought.

Each rule is a small class (`base.Rule`) with a stable code (`codes` gives its level and
summary) that reads one compiled plan; `report.run` applies them all, marks the findings the
plan's waivers accept, and locates each in the blueprint file. The cost, the sizing and every
other fact a rule compares come with the plan, computed once by compile.
"""
