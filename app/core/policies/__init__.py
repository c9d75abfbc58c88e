"""Scheduling policies, one per module, each named after what it decides.

Filters answer "may this pod go to this node, and if not, why" (``resourcefit``, ``taints``,
``nodeaffinity``, ``nodeunschedulable``); scorers rank feasible nodes 0-10 (``binpack``,
``spread``). ``app.core.verbs.filter`` and ``app.core.verbs.prioritize`` run them in a fixed order.
"""
