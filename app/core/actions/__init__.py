"""Actions: verbs a scheduling cycle applies to a view of the cluster (allocate a gang,
allocate inside one topology domain, backfill, preempt, reclaim) and the victim units they evict.

May import ``model``, ``gpu``, ``state`` and ``policies``.
"""
