"""What decides the plan of a command's model (the plan cache's key)."""

from __future__ import annotations

import argparse
from pathlib import Path


def plan_parts(args: argparse.Namespace, variant, batch: int, data) -> dict:
    """What decides the plan of ``args`` (:meth:`fusion.compiler.plan_cache.PlanCache.key`)."""
    import hashlib

    from fusion.compiler.plan_folder import file_sha256
    from fusion.kernels.cache import codegen_version
    from hwgen.gateware.sources import gateware_digest

    hints = None
    if data is not None:
        h = hashlib.sha256()
        for name in sorted(data.masks):
            mask = data.masks[name]
            h.update(f"{name}{mask.shape}".encode() + mask.tobytes())
        hints = h.hexdigest()
    return {"model": file_sha256(Path(args.model)), "input_shape": args.input_shape,
            "batch": batch, "variant": variant.config.key(), "gateware": gateware_digest(),
            "platform": variant.platform.to_dict(), "no_fusion": args.no_fusion,
            "min_gain": args.min_gain, "no_host_fallback": args.no_host_fallback,
            "without": args.without.to_dict() if args.without else None,
            "codegen": codegen_version(), "zero_hints": hints}
