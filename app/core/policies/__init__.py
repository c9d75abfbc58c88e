"""Policies: nouns, one per module, each named after what it decides and behind one of the
small interfaces in ``interfaces`` (filters, scorers, queue order, quota); ``registry`` lists
which run and in which order. GPU placement policies (``gpushare``, ``fgd``) rank devices.

May import ``model``, ``gpu`` and ``state``.
"""
