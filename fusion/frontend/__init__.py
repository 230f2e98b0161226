"""Frontends: turn models (ONNX, hwgen JSON, the Python builder) into :mod:`fusion.ir` graphs."""


def __getattr__(name: str):
    # Lazy, so that the JSON frontend and the builder do not pay for importing onnx.
    if name == "import_onnx":
        from fusion.frontend.onnx_import import import_onnx

        return import_onnx
    raise AttributeError(f"module 'fusion.frontend' has no attribute {name!r}")
