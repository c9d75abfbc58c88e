"""Muster's Kubernetes side: the only package that imports the ``kubernetes`` client.

``config`` builds an API client, ``sync`` feeds ``app.core.state.cache.ClusterCache`` from
list+watch loops, and ``gateway`` carries out binds, evictions, patches and events.
"""
