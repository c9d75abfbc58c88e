"""Answers about the scheduler that change nothing: why a job is pending (explain) and what
would happen if one were submitted (what-if), as pure functions of the planner's ``Outlook``.

The top of the core: may import every other layer, and ``admission`` (what-if sizes a
workload's gang the way the webhook does).
"""
