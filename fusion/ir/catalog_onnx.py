"""Catalog entries of the ONNX-semantics ops (registered into :mod:`fusion.ir.registry`).

Each function checks the dtypes and attributes of one op and infers its output types. The
semantics are the ONNX spec's; :mod:`fusion.reference.executor` runs them.
"""

from __future__ import annotations

from fusion.ir import shapes
from fusion.ir.registry import INT8S, ONNX_ELEM_TYPES, Call, TensorType, register

_NUM = ("float32", "int8", "uint8", "int32", "int64")
_MM = ("float32", "int32", "int64")
_CONV = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
         "pads": None, "strides": None}


def _scale_shape(c: Call, scale: str, zp: str, x_shape: tuple[int, ...], axis: int,
                 block: int = 0) -> None:
    """Check a Q/DQ scale (and zero point): scalar, per-axis 1-D, or blocked."""
    s = c.need(scale, ("float32",))
    z = c.tensor(zp)
    # () and (1,) are both per tensor: onnxruntime's quantizer writes a (1,) bias scale with a
    # () zero point, and onnxruntime runs it
    if z is not None and z.shape != s.shape and not {z.shape, s.shape} <= {(), (1,)}:
        raise c.error(f"{zp!r} has shape {z.shape} but {scale!r} has {s.shape}; they must match")
    if s.shape in ((), (1,)) and not block:
        return  # per tensor: the axis is not used
    axis = shapes.axis(axis, max(len(x_shape), 1))
    if block:
        want = list(x_shape)
        want[axis] = -(-x_shape[axis] // block)
        if s.shape != tuple(want):
            raise c.error(f"blocked {scale!r} must have shape {tuple(want)}, not {s.shape}")
    elif s.shape != (x_shape[axis],):
        raise c.error(f"{scale!r} has shape {s.shape}; give a scalar (per tensor) or "
                      f"{x_shape[axis]} values (one per channel of axis {axis})")


@register("QuantizeLinear", "x y_scale y_zero_point", 2, const="y_scale y_zero_point",
     axis=1, saturate=1, block_size=0, output_dtype=0, precision=0,
     summary="y = saturate(round_half_even(x / scale) + zero_point)")
def _quantize_linear(c: Call):
    x = c.need("x", ("float32", "int32"))
    z = c.tensor("y_zero_point")
    odt = c.attrs["output_dtype"]
    if odt and odt not in ONNX_ELEM_TYPES:
        raise c.error(f"output_dtype {odt} is not supported; use int8 or uint8")
    out = z.dtype if z is not None else ONNX_ELEM_TYPES.get(odt, "uint8") if odt else "uint8"
    if odt and ONNX_ELEM_TYPES[odt] != out:
        raise c.error(f"output_dtype {ONNX_ELEM_TYPES[odt]} differs from the zero point's {out}")
    if out not in INT8S:
        raise c.error(f"quantizing to {out} is not supported; use int8 or uint8")
    if c.attrs["precision"]:
        raise c.error("the precision attribute is not supported; leave it 0")
    _scale_shape(c, "y_scale", "y_zero_point", x.shape, c.attrs["axis"], c.attrs["block_size"])
    return (TensorType(x.shape, out),)


@register("DequantizeLinear", "x x_scale x_zero_point", 2, const="x_scale x_zero_point",
     axis=1, block_size=0, output_dtype=0, summary="y = (x - zero_point) * scale")
def _dequantize_linear(c: Call):
    x = c.need("x", ("int8", "uint8", "int32"))
    c.same("x", "x_zero_point")
    if c.attrs["output_dtype"] not in (0, 1):
        raise c.error("output_dtype must be float32 (1) or unset")
    _scale_shape(c, "x_scale", "x_zero_point", x.shape, c.attrs["axis"], c.attrs["block_size"])
    return (TensorType(x.shape, "float32"),)


@register("MatMul", "A B", weights="B", summary="numpy.matmul")
def _matmul(c: Call):
    a = c.need("A", _MM)
    c.same("A", "B")
    return (TensorType(shapes.matmul(a.shape, c.tensor("B").shape), a.dtype),)


@register("Gemm", "A B C", 2, weights="B", alpha=1.0, beta=1.0, transA=0, transB=0,
     summary="alpha * A' @ B' + beta * C")
def _gemm(c: Call):
    a = c.need("A", _MM)
    c.same("A", "B", "C")
    b = c.tensor("B")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise c.error(f"A and B must be 2-D, not {a.shape} and {b.shape}")
    (m, k), (k2, n) = a.shape[::-1 if c.attrs["transA"] else 1], b.shape[::-1 if
                                                                        c.attrs["transB"] else 1]
    if k != k2:
        raise c.error(f"inner dimensions differ: {k} and {k2} (check transA/transB)")
    cc = c.tensor("C")
    if cc is not None and shapes.broadcast(cc.shape, (m, n)) != (m, n):
        raise c.error(f"C {cc.shape} does not broadcast to the output {(m, n)}")
    return (TensorType((m, n), a.dtype),)


def conv_window(c: Call, x_shape: tuple[int, ...], w_shape: tuple[int, ...]):
    """Check a 2-D convolution's operands and attributes; the output shape and pads."""
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise c.error(f"only 2-D convolutions (4-D NCHW input and MCkk weights) are supported, "
                      f"not {x_shape} and {w_shape}")
    group = c.attrs["group"]
    kernel = c.attrs["kernel_shape"]
    if kernel is not None and tuple(kernel) != w_shape[2:]:
        raise c.error(f"kernel_shape {tuple(kernel)} differs from the weights' {w_shape[2:]}")
    if group < 1 or x_shape[1] % group or w_shape[0] % group or x_shape[1] // group != w_shape[1]:
        raise c.error(f"input channels {x_shape[1]}, weight shape {w_shape} and group {group} "
                      f"do not agree (weights must be M x C/group x kH x kW)")
    out, begin, end = shapes.window(x_shape[2:], w_shape[2:], c.attrs["strides"],
                                    c.attrs["dilations"], c.attrs["pads"],
                                    c.attrs.get("auto_pad", "NOTSET"))
    return (x_shape[0], w_shape[0], *out), begin + end


@register("Conv", "X W B", 2, weights="W", **_CONV, summary="ONNX Conv (2-D)")
def _conv(c: Call):
    x = c.need("X", ("float32",))
    c.same("X", "W", "B")
    w = c.tensor("W")
    shape, _ = conv_window(c, x.shape, w.shape)
    b = c.tensor("B")
    if b is not None and b.shape != (w.shape[0],):
        raise c.error(f"bias B must have shape ({w.shape[0]},), not {b.shape}")
    return (TensorType(shape, x.dtype),)


def broadcast_binary(c: Call) -> tuple[TensorType]:
    """The output of an element-wise op of inputs ``A`` and ``B`` of one numeric dtype,
    broadcast as numpy does (Add, Mul)."""
    a = c.need("A", _NUM)
    c.same("A", "B")
    return (TensorType(shapes.broadcast(a.shape, c.tensor("B").shape), a.dtype),)


@register("Add", "A B", summary="elementwise sum with broadcasting (integers wrap)")
def _add(c: Call):
    return broadcast_binary(c)


#: Most inputs a Sum may take (ONNX's is variadic; the registry's slots are fixed names).
MAX_SUM_INPUTS = 8


@register("Sum", " ".join(f"data_{i}" for i in range(MAX_SUM_INPUTS)), 1,
          summary="elementwise sum of the inputs with broadcasting (a quantized Sum of two "
                  "is the residual add, qadd)")
def _sum(c: Call):
    return variadic_broadcast(c, _NUM)


def variadic_broadcast(c: Call, dtypes: tuple[str, ...]) -> tuple[TensorType]:
    """The output of an element-wise op of inputs ``data_0``, ``data_1``... of one dtype
    among ``dtypes``, broadcast as numpy does (Sum, Max, Min)."""
    present = [t for t in c.inputs if t is not None]
    c.need("data_0", dtypes)
    shape = present[0].shape
    for i in range(1, len(c.inputs)):
        if c.inputs[i] is not None:
            c.same("data_0", f"data_{i}")
            shape = shapes.broadcast(shape, c.inputs[i].shape)
    return (TensorType(shape, present[0].dtype),)


@register("Relu", "X", summary="max(x, 0)")
def _relu(c: Call):
    x = c.need("X", ("float32", "int8", "int32", "int64"))
    return (TensorType(x.shape, x.dtype),)


@register("Clip", "input min max", 1, const="min max", summary="min(max(x, min), max)")
def _clip(c: Call):
    x = c.need("input", _NUM)
    c.same("input", "min", "max")
    for name in ("min", "max"):
        t = c.tensor(name)
        if t is not None and t.shape not in ((), (1,)):
            raise c.error(f"{name!r} must be a scalar, not shape {t.shape}")
    return (TensorType(x.shape, x.dtype),)


@register("MaxPool", "X", auto_pad="NOTSET", ceil_mode=0, dilations=None,
     kernel_shape=None, pads=None, storage_order=0, strides=None, summary="ONNX MaxPool")
def _maxpool(c: Call):
    x = c.need("X", ("float32", "int8", "uint8"))
    if len(c.node.outputs) > 1:
        raise c.error("the Indices output of MaxPool is not supported; use only Y")
    kernel = c.attrs["kernel_shape"]
    if kernel is None or len(x.shape) != len(kernel) + 2:
        raise c.error(f"kernel_shape {kernel} must have one entry per spatial dimension of "
                      f"the input {x.shape}")
    out, _, _ = shapes.window(x.shape[2:], kernel, c.attrs["strides"], c.attrs["dilations"],
                              c.attrs["pads"], c.attrs["auto_pad"], c.attrs["ceil_mode"])
    return (TensorType((*x.shape[:2], *out), x.dtype),)


@register("Flatten", "input", axis=1, summary="reshape to 2-D at axis")
def _flatten(c: Call):
    x = c.need("input", _NUM)
    return (TensorType(shapes.flatten(x.shape, c.attrs["axis"]), x.dtype),)


@register("Reshape", "data shape", const="shape", allowzero=0, summary="ONNX Reshape")
def _reshape(c: Call):
    x = c.need("data", _NUM)
    c.need("shape", ("int64",))
    target = c.value("shape")
    if target is None:
        raise c.error(f"its shape input {c.node.inputs[1]!r} must be a constant initializer "
                      f"(hwgen graphs have static shapes)")
    return (TensorType(shapes.reshape(x.shape, target.ravel().tolist(),
                                      c.attrs["allowzero"]), x.dtype),)


@register("Transpose", "data", perm=None, summary="permute axes")
def _transpose(c: Call):
    x = c.need("data", _NUM)
    return (TensorType(shapes.transpose(x.shape, c.attrs["perm"]), x.dtype),)


@register("Identity", "input", summary="y = x")
def _identity(c: Call):
    x = c.need("input", _NUM)
    return (TensorType(x.shape, x.dtype),)


def _zp_matches(c: Call, *pairs: tuple[str, str]) -> None:
    for value, zp in pairs:
        c.same(value, zp)


@register("QLinearMatMul", "a a_scale a_zero_point b b_scale b_zero_point y_scale y_zero_point",
     const="a_scale a_zero_point b_scale b_zero_point y_scale y_zero_point", weights="b",
     summary="requantized (a - a_zp) @ (b - b_zp)")
def _qlinear_matmul(c: Call):
    a, b = c.need("a", INT8S), c.need("b", INT8S)
    y = c.need("y_zero_point", INT8S)
    _zp_matches(c, ("a", "a_zero_point"), ("b", "b_zero_point"))
    for s in ("a_scale", "b_scale", "y_scale"):
        c.need(s, ("float32",))
    return (TensorType(shapes.matmul(a.shape, b.shape), y.dtype),)


@register("QLinearConv", "x x_scale x_zero_point w w_scale w_zero_point y_scale y_zero_point B", 8,
     const="x_scale x_zero_point w_scale w_zero_point y_scale y_zero_point B", weights="w",
     **_CONV, summary="requantized conv of (x - x_zp) and (w - w_zp), plus an int32 bias")
def _qlinear_conv(c: Call):
    x, w = c.need("x", INT8S), c.need("w", INT8S)
    y = c.need("y_zero_point", INT8S)
    _zp_matches(c, ("x", "x_zero_point"), ("w", "w_zero_point"))
    if c.tensor("B") is not None:
        c.need("B", ("int32",))
    shape, _ = conv_window(c, x.shape, w.shape)
    return (TensorType(shape, y.dtype),)


@register("MatMulInteger", "A B a_zero_point b_zero_point", 2, const="a_zero_point b_zero_point",
     weights="B", summary="(A - a_zp) @ (B - b_zp) in int32")
def _matmul_integer(c: Call):
    a, b = c.need("A", INT8S), c.need("B", INT8S)
    _zp_matches(c, ("A", "a_zero_point"), ("B", "b_zero_point"))
    return (TensorType(shapes.matmul(a.shape, b.shape), "int32"),)


@register("ConvInteger", "x w x_zero_point w_zero_point", 2, const="x_zero_point w_zero_point",
     weights="w", **_CONV, summary="conv of (x - x_zp) and (w - w_zp) in int32")
def _conv_integer(c: Call):
    x, w = c.need("x", INT8S), c.need("w", INT8S)
    _zp_matches(c, ("x", "x_zero_point"), ("w", "w_zero_point"))
    shape, _ = conv_window(c, x.shape, w.shape)
    return (TensorType(shape, "int32"),)



# -- pooling ---------------------------------------------------------------------------------

_POOL = {"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0, "dilations": None,
         "kernel_shape": None, "pads": None, "strides": None}


def _pool_shape(c: Call, x_shape: tuple[int, ...]) -> tuple[int, ...]:
    kernel = c.attrs["kernel_shape"]
    if kernel is None or len(x_shape) != len(kernel) + 2:
        raise c.error(f"kernel_shape {kernel} must have one entry per spatial dimension of "
                      f"the input {x_shape}")
    out, _, _ = shapes.window(x_shape[2:], kernel, c.attrs["strides"], c.attrs["dilations"],
                              c.attrs["pads"], c.attrs["auto_pad"], c.attrs["ceil_mode"])
    return (*x_shape[:2], *out)


def _global_shape(c: Call, x_shape: tuple[int, ...]) -> tuple[int, ...]:
    if len(x_shape) < 3:
        raise c.error(f"the input {x_shape} needs a batch, a channel and spatial axes")
    return (*x_shape[:2], *(1,) * (len(x_shape) - 2))


@register("AveragePool", "X", **_POOL,
     summary="ONNX AveragePool (count_include_pad: padding counts in the divisor)")
def _avgpool(c: Call):
    x = c.need("X", ("float32",))
    return (TensorType(_pool_shape(c, x.shape), x.dtype),)


@register("GlobalAveragePool", "X", summary="mean over the spatial axes")
def _global_avgpool(c: Call):
    x = c.need("X", ("float32",))
    return (TensorType(_global_shape(c, x.shape), x.dtype),)


# -- onnxruntime's com.microsoft quantized ops -----------------------------------------------
# The importer takes these from the com.microsoft domain only (onnx_import.CONTRIB_OPS).


def _qlinear_pool(c: Call, shape) -> tuple[TensorType, ...]:
    x = c.need("X", INT8S)
    _zp_matches(c, ("X", "x_zero_point"), ("X", "y_zero_point"))
    for s in ("x_scale", "y_scale"):
        c.need(s, ("float32",))
    if c.attrs["channels_last"]:
        raise c.error("channels_last=1 (NHWC) is not supported; export the model with NCHW "
                      "pooling (channels_last=0)")
    return (TensorType(shape(c, x.shape), x.dtype),)


@register("QLinearAveragePool", "X x_scale x_zero_point y_scale y_zero_point", 4,
     const="x_scale x_zero_point y_scale y_zero_point", **_POOL, channels_last=0,
     summary="com.microsoft: Q(AveragePool(DQ(X)))")
def _qlinear_avgpool(c: Call):
    return _qlinear_pool(c, _pool_shape)


@register("QLinearGlobalAveragePool", "X x_scale x_zero_point y_scale y_zero_point", 4,
     const="x_scale x_zero_point y_scale y_zero_point", channels_last=0,
     summary="com.microsoft: Q(GlobalAveragePool(DQ(X)))")
def _qlinear_global_avgpool(c: Call):
    return _qlinear_pool(c, _global_shape)


@register("QLinearAdd", "A A_scale A_zero_point B B_scale B_zero_point C_scale C_zero_point", 7,
     const="A_scale A_zero_point B_scale B_zero_point C_scale C_zero_point",
     summary="com.microsoft: Q(DQ(A) + DQ(B)), broadcasting")
def _qlinear_add(c: Call):
    return qlinear_binary(c)


def qlinear_binary(c: Call) -> tuple[TensorType]:
    """The output of onnxruntime's element-wise ``QLinear*`` ops of ``A`` and ``B`` (8-bit,
    one dtype with their zero points, float32 scales), broadcast as numpy does (QLinearAdd,
    QLinearMul)."""
    a = c.need("A", INT8S)
    c.same("A", "A_zero_point", "B", "B_zero_point", "C_zero_point")
    for s in ("A_scale", "B_scale", "C_scale"):
        c.need(s, ("float32",))
    return (TensorType(shapes.broadcast(a.shape, c.tensor("B").shape), a.dtype),)


@register("QGemm", "A a_scale a_zero_point B b_scale b_zero_point C y_scale y_zero_point", 6,
     const="a_scale a_zero_point b_scale b_zero_point C y_scale y_zero_point", weights="B",
     alpha=1.0, transA=0, transB=0,
     summary="com.microsoft: alpha*a_scale*b_scale*((A'-a_zp) @ (B'-b_zp) + C), quantized "
             "to y when y_scale is given")
def _qgemm(c: Call):
    a, b = c.need("A", INT8S), c.need("B", INT8S)
    _zp_matches(c, ("A", "a_zero_point"), ("B", "b_zero_point"))
    for s in ("a_scale", "b_scale"):
        c.need(s, ("float32",))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise c.error(f"A and B must be 2-D, not {a.shape} and {b.shape}")
    (m, k), (k2, n) = (a.shape[::-1 if c.attrs["transA"] else 1],
                       b.shape[::-1 if c.attrs["transB"] else 1])
    if k != k2:
        raise c.error(f"inner dimensions differ: {k} and {k2} (check transA/transB)")
    cc = c.tensor("C")
    if cc is not None:
        c.need("C", ("int32",))
        if shapes.broadcast(cc.shape, (m, n)) != (m, n):
            raise c.error(f"C {cc.shape} does not broadcast to the output {(m, n)}")
    if c.tensor("y_scale") is None:
        return (TensorType((m, n), "float32"),)
    c.need("y_scale", ("float32",))
    y = c.need("y_zero_point", INT8S, " (with y_scale, give the output zero point)")
    return (TensorType((m, n), y.dtype),)
