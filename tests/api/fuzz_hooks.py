"""schemathesis hooks for ``tests/api/test_fuzz.py`` (loaded through ``SCHEMATHESIS_HOOKS``).

One extra check, run with ``--checks all``: every 4xx names its field. A 422 says which field
is wrong (``field`` non-empty, and the message starts with it); a 400 leaves ``field`` empty
only when the body as a whole is wrong (empty, not JSON, not a JSON object).
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis

WHOLE_BODY = ("empty request body", "malformed JSON", "expected a JSON object")
#: The test reads this file to know the check ran (one status code a line).
SEEN = os.environ.get("MUSTER_FUZZ_CHECKED")


@schemathesis.check
def four_xx_names_its_field(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 4xx answer is ``{"error", "field"}`` naming the field (or the body as a whole)."""
    status = response.status_code
    if not 400 <= status < 500 or status in (404, 405):
        return None
    if SEEN:
        with open(SEEN, "a") as seen:
            seen.write(f"{status}\n")
    body = response.json()
    error, field = body.get("error", ""), body.get("field")
    assert isinstance(error, str) and error, f"{status} without an error message: {body}"
    assert isinstance(field, str), f"{status} without a field: {body}"
    if status == 422:
        assert field, f"422 naming no field: {body}"
        assert error.startswith(f"{field}: "), f"422 message does not start with {field!r}"
    elif not field:
        problem = error.removeprefix("not an AdmissionReview: ")
        assert problem.startswith(WHOLE_BODY), f"400 naming no field: {body}"
    return True
