"""Planner actions, one verb per module: what a scheduling cycle does to pending work."""
