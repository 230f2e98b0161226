"""Reading the user's files: strict JSON (no ``NaN`` or ``Infinity``, which are not JSON).

Not gateware: :mod:`hwgen.gateware.sources` leaves this module out of the build digest.
"""

from __future__ import annotations

import json
from typing import Any


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def loads_json(text: str | bytes) -> Any:
    """``text`` parsed as JSON, refusing ``NaN``, ``Infinity`` and ``-Infinity`` (Python's
    json reads them; no other reader does).

    Raises
    ------
    ValueError
        Text that is not JSON (``json.JSONDecodeError``) or holds one of those constants.
    """
    return json.loads(text, parse_constant=_no_constant)
