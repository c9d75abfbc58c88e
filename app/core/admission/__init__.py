"""The admission webhooks' decisions: which pods Muster manages, the JSONPatch that tags them
with gang and queue metadata from their owners, and the validation of gang metadata.

Beside the scheduling stack: may import ``model`` only.
"""
