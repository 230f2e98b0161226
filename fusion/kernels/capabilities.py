"""What a variant can run, as its descriptor records it, and the check a runtime makes before
it gives a variant a kernel.

A variant's *capabilities* are the kernel kinds it can run at all, each kind's own answer
(:meth:`fusion.kernels.protocol.KernelKind.variant_refusal`: the window kind needs the window
unit, the window convolution window loads, the element-wise max the residual stage), and its
epilogue chain: a kernel may fuse any ordered subset of it
(:func:`fusion.kernels.protocol.stage_refusal`). ``hwgen variants build`` writes them into
``variant.json`` as ``"capabilities": {"kinds": [...], "stages": [...]}``; :func:`covers`
reads them back without the config, so that a descriptor whose capabilities were edited or
written by another hwgen is judged by what it says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fusion.kernels.kinds import KINDS
from fusion.kernels.protocol import stage_refusal
from hwgen.config import EPILOGUE_STAGES, VariantConfig


def capabilities(config: VariantConfig) -> dict[str, Any]:
    """The capabilities of ``config``: ``{"kinds": sorted kind names, "stages": the epilogue
    chain in order}`` (module docstring)."""
    kinds = sorted(name for name, k in KINDS.items() if k.variant_refusal(config) is None)
    return {"kinds": kinds, "stages": list(config.epilogue)}


def capability_problem(caps: Any) -> str | None:
    """Why ``caps`` (read from a descriptor) is not a capabilities record, or None."""
    if not isinstance(caps, Mapping):
        return "it has no capabilities object"
    kinds, stages = caps.get("kinds"), caps.get("stages")
    if not (isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)):
        return "its capabilities name no list of kernel kinds"
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        return (f"its capabilities name unknown kernel kinds {', '.join(unknown)} (the kinds "
                f"are {', '.join(sorted(KINDS))})")
    if not (isinstance(stages, list) and all(s in EPILOGUE_STAGES for s in stages)):
        return (f"its capabilities' stages {stages!r} are not a list of epilogue stages "
                f"({', '.join(EPILOGUE_STAGES)})")
    return None


def covers(caps: Any, kind_name: str, stages: Sequence[str]) -> str | None:
    """Why a variant with capabilities ``caps`` cannot run a ``kind_name`` kernel fusing
    ``stages``, or None when it can.

    Parameters
    ----------
    caps : dict
        A descriptor's ``"capabilities"`` (:func:`capabilities`).
    kind_name : str
        The kernel's kind (:data:`fusion.kernels.kinds.KINDS`).
    stages : sequence of str
        The epilogue stages the kernel runs.

    Returns
    -------
    str or None
        One sentence naming the missing kind or stage (or the malformed record) and the fix.
    """
    problem = capability_problem(caps)
    if problem is not None:
        return f"the descriptor is not usable: {problem}; rebuild it with 'hwgen variants build'"
    if kind_name not in caps["kinds"]:
        return (f"the variant cannot run {kind_name} kernels (it runs "
                f"{', '.join(caps['kinds']) or 'none'}); use a variant that can")
    refusal = stage_refusal(kind_name, stages, caps["stages"])
    return None if refusal is None else refusal.text
