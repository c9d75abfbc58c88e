"""The scheduling cycle: the planner that orders every pending gang, runs the actions and
holds the resulting plans, and the background loop that drives it.

May import every layer below it: ``model``, ``gpu``, ``state``, ``policies``, ``actions``.
"""
