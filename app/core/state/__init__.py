"""What Muster knows of the cluster now: the cluster cache and its immutable views, node
tables, network-topology domains, queue usage, the queue file, and the ``Gateway`` port through
which decisions reach the cluster.

May import ``model`` and ``gpu``.
"""
