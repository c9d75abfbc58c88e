"""The domain model: resources, nodes, pods, gangs, queues, quantities, labels, the ``Status``
result type and the exception hierarchy, as immutable values parsed from Kubernetes JSON.

May import nothing else of ``app.core``: everything else builds on it.
"""
