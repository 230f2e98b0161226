"""The edge cases of the epilogue stages: which occur in a kernel's values, and how to plant them.

A fault in a stage often changes only values at a boundary (a ReLU that lets -1 through, a
saturation one short, a rounding rule that differs only on exact halves), which random
operands may never reach. This module names those boundaries and works on a GEMM's operands:

- :func:`coverage` counts, on the reference's intermediate values (each stage's input), how
  often each :data:`EVENTS` case occurs;
- :func:`plant` edits rows of ``a`` (and the residual) so that every event a kernel can reach
  occurs: for each event it picks the interval of accumulator values that reach it through
  the stages before (every stage is monotone in its input, so binary search finds it, per
  column), and solves one row of ``a`` against the fixed column of ``b`` for a value inside.

The events, per stage (``x`` is the stage's input, ``r`` the residual):

- ``bias``: the sum negative, positive;
- ``requant``: saturation above 127 and below -128 (before the saturation), an exact rounding
  tie with ``x`` positive and with ``x`` negative (reachable only when the multiplier's odd part
  is small: :func:`tie_values`);
- ``relu``: ``x < -1``, ``x = -1``, ``x = 0``, ``x > 0``;
- ``clamp``: below, at and above each bound, and between;
- ``residual``: add: the sum above 127, below -128, at 127, at -128; max: ``x > r``,
  ``x < r``, ``x = r``; scaled add: the rounded sum (plus the zero point) above ``res_hi``,
  below ``res_lo``, at each bound, and an exact rounding tie.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hwgen.lanes import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, round_shift
from hwgen.reference import OPERANDS, SPECS, EpilogueParams, apply_stage

#: Stage -> its events, in a fixed order.
EVENTS: dict[str, tuple[str, ...]] = {
    "bias": ("x + bias < 0", "x + bias > 0"),
    "requant": ("saturates above 127", "saturates below -128", "tie, x > 0", "tie, x < 0"),
    "relu": ("x < -1", "x = -1", "x = 0", "x > 0"),
    "clamp": ("x < lo", "x = lo", "lo < x < hi", "x = hi", "x > hi"),
    "residual": ("x + r > 127", "x + r < -128", "x + r = 127", "x + r = -128"),
    "residual max": ("x > r", "x < r", "x = r"),
    "residual scaled": ("y > hi", "y < lo", "y = hi", "y = lo", "tie"),
}


def _channel(params: EpilogueParams, operands: Mapping, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each column's requantize multiplier and shift."""
    if params.per_channel:
        return (np.asarray(operands["mult"], np.int64).reshape(n),
                np.asarray(operands["shift"], np.int64).reshape(n))
    return np.full(n, params.mult, np.int64), np.full(n, params.shift, np.int64)


def _unsaturated(x: np.ndarray, mult: np.ndarray, shift: np.ndarray, zp: int,
                 even: bool = False) -> np.ndarray:
    """The requantized value before its saturation (as :func:`hwgen.lanes.requantize`)."""
    return round_shift(x * mult, shift, even=even) + zp


def _scaled_sum(x: np.ndarray, r: np.ndarray, p: EpilogueParams) -> tuple[np.ndarray, np.ndarray]:
    """The residual stage's scaled add before its bounds (``y``), and where it is an exact
    tie (as :func:`hwgen.lanes.residual_scaled`)."""
    total = (x - p.res_x_zp) * p.res_x_mult + (r - p.res_r_zp) * p.res_r_mult
    y = round_shift(total, p.res_shift, even=True) + p.res_zp
    s = p.res_shift
    tie = (total & ((1 << s) - 1)) == (1 << (s - 1)) if s else np.zeros(total.shape, bool)
    return y, tie


def _ties(x: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    low = (x * mult) & ((np.int64(1) << shift) - 1)
    return (shift > 0) & (low == (np.int64(1) << np.maximum(shift - 1, 0)))


def _stage_name(stage: str, params: EpilogueParams) -> str:
    if stage == "residual" and params.residual_op != "add":
        return f"residual {params.residual_op}"
    return stage


def stage_events(stage: str, x: np.ndarray, params: EpilogueParams,
                 operands: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    """Where each event of ``stage`` occurs, for its input ``x`` (M x N)."""
    x = np.asarray(x, np.int64)
    name = _stage_name(stage, params)
    if name == "bias":
        s = x + np.asarray(operands["bias"], np.int64)
        cases = (s < 0, s > 0)
    elif name == "requant":
        mult, shift = _channel(params, operands, x.shape[-1])
        y = _unsaturated(x, mult, shift, params.zp, params.round_even)
        tie = _ties(x, mult, shift)
        cases = (y > INT8_MAX, y < INT8_MIN, tie & (x > 0), tie & (x < 0))
    elif name == "relu":
        cases = (x < -1, x == -1, x == 0, x > 0)
    elif name == "clamp":
        lo, hi = params.clamp_lo, params.clamp_hi
        cases = (x < lo, x == lo, (x > lo) & (x < hi), x == hi, x > hi)
    elif name == "residual scaled":
        y, tie = _scaled_sum(x, np.asarray(operands["residual"], np.int64), params)
        lo, hi = params.res_lo, params.res_hi
        cases = (y > hi, y < lo, y == hi, y == lo, tie)
    else:
        r = np.asarray(operands["residual"], np.int64)
        s = x + r
        cases = ((s > INT8_MAX, s < INT8_MIN, s == INT8_MAX, s == INT8_MIN) if name == "residual"
                 else (x > r, x < r, x == r))
    return dict(zip(EVENTS[name], cases, strict=True))


def coverage(x0: np.ndarray, stages: Sequence[str], params: EpilogueParams,
             **operands: np.ndarray | None) -> dict[str, int]:
    """How often each event of ``stages`` occurs when they run on ``x0`` (the accumulators),
    keyed ``"<stage>: <event>"``."""
    found = {}
    x = np.asarray(x0, np.int64)
    for stage in stages:
        for event, where in stage_events(stage, x, params, operands).items():
            found[f"{_stage_name(stage, params)}: {event}"] = int(np.count_nonzero(where))
        x = apply_stage(x, stage, params, **operands)
    return found


def tie_values(mult: int, shift: int) -> tuple[int, int] | None:
    """The positive and the negative input of smallest magnitude whose product with ``mult``
    is an exact half at ``shift`` (``x * mult = (2j + 1) * 2**(shift - 1)``), or None."""
    if mult == 0 or shift == 0:
        return None
    p = (abs(mult) & -abs(mult)).bit_length() - 1  # mult = odd * 2**p
    if p > shift - 1:
        return None
    period = 1 << (shift - p)
    odd = (mult >> p) % period
    v = ((1 << (shift - 1 - p)) * pow(odd, -1, period)) % period
    return v, v - period


def _interval(h, lo: int, hi: int) -> tuple[int, int] | None:
    """The integers v in the int32 range with ``lo <= h(v) <= hi`` for a monotone ``h``."""
    increasing = h(INT32_MAX) >= h(INT32_MIN)

    def first(pred) -> int:  # the smallest v where pred holds (pred monotone, False -> True)
        a, b = INT32_MIN, INT32_MAX + 1
        while a < b:
            mid = (a + b) // 2
            if pred(mid):
                b = mid
            else:
                a = mid + 1
        return a

    if increasing:
        a, b = first(lambda v: h(v) >= lo), first(lambda v: h(v) > hi) - 1
    else:
        a, b = first(lambda v: h(v) <= hi), first(lambda v: h(v) < lo) - 1
    return (a, b) if a <= b else None


def _targets(stage: str, params: EpilogueParams) -> dict[str, tuple[str, int, int]]:
    """Event -> (what, lo, hi): the range of the stage's input (``"x"``), of the biased sum
    (``"s"``) or of the requantized value before saturation (``"y"``) that reaches it; exact
    ties are done by :func:`plant`."""
    if stage == "bias":
        return {"x + bias < 0": ("s", -(1 << 20), -1), "x + bias > 0": ("s", 1, 1 << 20)}
    if stage == "requant":
        return {"saturates above 127": ("y", INT8_MAX + 1, INT8_MAX + 40),
                "saturates below -128": ("y", INT8_MIN - 40, INT8_MIN - 1)}
    if stage == "relu":
        return {"x < -1": ("x", -100, -2), "x = -1": ("x", -1, -1), "x = 0": ("x", 0, 0),
                "x > 0": ("x", 1, 100)}
    if stage == "clamp":
        lo, hi = params.clamp_lo, params.clamp_hi
        # just past each bound: a bound off by one shows there
        return {"x < lo": ("x", lo - 1, lo - 1), "x = lo": ("x", lo, lo),
                "lo < x < hi": ("x", lo + 1, hi - 1), "x = hi": ("x", hi, hi),
                "x > hi": ("x", hi + 1, hi + 1)}
    return {}


def _through(stages: Sequence[str], params: EpilogueParams, operands: Mapping, col: int):
    """``v -> the value entering the stage after stages``, for one accumulator of column
    ``col`` (operands sliced to that column)."""
    one = {}
    for key, value in operands.items():
        if value is not None and np.ndim(value) == 1:
            one[key] = np.asarray(value)[col:col + 1]

    def h(v: int) -> int:
        x = np.array([[v]], np.int64)
        for stage in stages:
            x = apply_stage(x, stage, params, **one)
        return int(x[0, 0])
    return h


def solve_row(a: np.ndarray, b: np.ndarray, lo: int, hi: int) -> bool:
    """Change the int8 row ``a`` in place so that ``a @ b`` falls in ``[lo, hi]``; True if it
    does. Greedy, a coordinate at a time, the largest ``|b|`` first; when the values ``a``
    holds leave too little room, from ``a // 4``, then from zero."""
    b = np.asarray(b, np.int64)
    order = [int(k) for k in np.argsort(-np.abs(b), kind="stable") if b[k]]
    goal = (lo + hi) // 2
    start = a.astype(np.int64)
    for a64 in (start.copy(), start // 4, np.zeros_like(start)):
        cur = int(a64 @ b)
        for _ in range(3):
            for k in order:
                if lo <= cur <= hi:
                    break
                step = round((goal - cur) / int(b[k]))
                new = int(np.clip(a64[k] + step, INT8_MIN, INT8_MAX))
                cur += (new - int(a64[k])) * int(b[k])
                a64[k] = new
        if lo <= cur <= hi:
            a[:] = a64.astype(a.dtype)
            return True
    return False


def plant(a: np.ndarray, b: np.ndarray, stages: Sequence[str], params: EpilogueParams,
          operands: Mapping[str, np.ndarray | None], rng: np.random.Generator,
          *, direct: bool = False) -> list[str]:
    """Plant every reachable event of ``stages`` into ``a`` (M x K, int8, edited in place) and
    the residual (``operands["residual"]``, edited in place), one event a row.

    ``direct``: ``a`` is the stages' input itself (a standalone pass: ``b`` is ignored and an
    element is set to the target); otherwise the input is ``a @ b``. Returns the events
    planted, as :func:`coverage` names them.
    """
    M, N = a.shape[0], (a.shape[1] if direct else np.shape(b)[1])  # noqa: N806
    operands = {k: v for k, v in operands.items() if k in OPERANDS}
    wanted: list[tuple[str, int, int, int]] = []  # (event, column, lo, hi) of the accumulator
    for i, stage in enumerate(stages):
        if stage == "residual":
            if params.residual_op == "scaled":
                # elements whose x is near each end of its range, for the residual to push
                # the sum past the bounds (_plant_scaled tries them first)
                for tag, lo, hi in (("top", INT8_MAX - 27, INT8_MAX), ("bottom", INT8_MIN,
                                                                       INT8_MIN + 27)):
                    col = int(rng.integers(N))
                    span = _interval(_through(stages[:i], params, operands, col), lo, hi)
                    if span is not None:
                        wanted.append((f"seed: {tag}", col, *span))
            continue
        for event, (what, lo, hi) in _targets(stage, params).items():
            col = int(rng.integers(N))
            h = _through(stages[:i], params, operands, col)
            if what == "s":  # the bias is the chain's first stage: x is the accumulator
                bias = int(np.asarray(operands["bias"])[col])
                span = (lo - bias, hi - bias)
            else:
                if what == "y":
                    mult, shift = _channel(params, operands, N)
                    h = lambda v, f=h, m=mult[col], s=shift[col]: int(  # noqa: E731
                        _unsaturated(np.int64(f(v)), m, s, params.zp, params.round_even))
                span = _interval(h, lo, hi)
            if span is not None:
                wanted.append((f"{stage}: {event}", col, *span))
        if stage == "requant":
            col = int(rng.integers(N))
            mult, shift = _channel(params, operands, N)
            ties = tie_values(int(mult[col]), int(shift[col]))
            bias = int(np.asarray(operands["bias"])[col]) if "bias" in stages[:i] else 0
            for event, v in zip(("tie, x > 0", "tie, x < 0"), ties or (), strict=False):
                wanted.append((f"requant: {event}", col, v - bias, v - bias))
    done = []
    planted: list[tuple[int, int]] = []
    seeds: list[tuple[int, int]] = []
    rows = rng.permutation(M)
    wanted.sort(key=lambda w: w[3] - w[2])  # single values first: random values rarely hit them
    for (event, col, lo, hi), m in zip(wanted, rows, strict=False):
        if direct:
            a[m, col] = np.clip((lo + hi) // 2, *_limits(a.dtype))
            ok = lo <= int(a[m, col]) <= hi
        else:
            ok = solve_row(a[m], np.asarray(b)[:, col], lo, hi)
        if ok and event.startswith("seed: "):
            seeds.append((int(m), col))
        elif ok:
            done.append(event)
            planted.append((int(m), col))
    residual = operands.get("residual")
    if "residual" in stages and residual is not None:
        # the planted values pass the residual stage unchanged, so that they reach the output
        # (the scaled add of the residual's zero point is a monotone function of x alone)
        keep = {"add": 0, "max": INT8_MIN, "scaled": params.res_r_zp}[params.residual_op]
        for m, col in planted:
            residual[m, col] = keep
        done += _plant_residual(a, b, stages, params, operands, rng, direct, planted, seeds)
    return done


def _limits(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _plant_residual(a, b, stages, params, operands, rng, direct, planted, seeds=()
                    ) -> list[str]:
    """Set residual elements against the residual stage's input at them (not at the elements
    ``planted`` for the stages before; first at the ``seeds``)."""
    x = np.asarray(a, np.int64) if direct else np.asarray(a, np.int64) @ np.asarray(b, np.int64)
    x = x.astype(np.int32).astype(np.int64)  # the accumulators wrap at 32 bits
    for stage in stages[:stages.index("residual")]:
        x = apply_stage(x, stage, params, **operands)
    r = operands["residual"]
    taken = {m * r.shape[1] + n for m, n in planted}
    flat = np.array([i for i in rng.permutation(r.size) if i not in taken], dtype=np.int64)
    done = []
    if params.residual_op == "scaled":
        first = np.array([m * r.shape[1] + n for m, n in seeds], dtype=np.int64)
        return _plant_scaled(x, r, np.concatenate([first, flat[~np.isin(flat, first)]]),
                             params)
    if params.residual_op == "max":
        goals = (("x > r", -1), ("x < r", 1), ("x = r", 0))
        for (event, d), idx in zip(goals, flat, strict=False):
            m, n = divmod(int(idx), r.shape[1])
            want = int(x[m, n]) + d
            if INT8_MIN <= want <= INT8_MAX:
                r[m, n] = want
                done.append(f"residual max: {event}")
        return done
    goals = (("x + r > 127", INT8_MAX + 1), ("x + r < -128", INT8_MIN - 1),
             ("x + r = 127", INT8_MAX), ("x + r = -128", INT8_MIN))
    for event, total in goals:
        # an element whose x lets an int8 r reach the sum (x + r = total, or past it)
        need = total - x
        ok = np.flatnonzero(((need >= INT8_MIN) & (need <= INT8_MAX)).reshape(-1)[flat])
        if total > INT8_MAX:
            ok = np.flatnonzero(x.reshape(-1)[flat] >= 1)
        elif total < INT8_MIN:
            ok = np.flatnonzero(x.reshape(-1)[flat] <= -1)
        if not len(ok):
            continue
        idx = int(flat[ok[0]])
        flat = np.delete(flat, ok[0])
        m, n = divmod(idx, r.shape[1])
        r[m, n] = INT8_MAX if total > INT8_MAX else INT8_MIN if total < INT8_MIN else int(
            total - x[m, n])
        done.append(f"residual: {event}")
    return done


def _plant_scaled(x: np.ndarray, r: np.ndarray, flat: np.ndarray, params: EpilogueParams
                  ) -> list[str]:
    """Set residual elements (of the free ones, ``flat``) so that the scaled add reaches each
    of its events: for each, the first free element and int8 ``r`` that reach it."""
    done = []
    values = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)
    for event in EVENTS["residual scaled"]:
        xs = x.reshape(-1)[flat]
        where = stage_events("residual", np.repeat(xs[:, None], values.size, axis=1), params,
                             {"residual": np.broadcast_to(values, (xs.size, values.size))})
        hits = np.argwhere(where[event])
        if hits.size:
            k, v = (int(i) for i in hits[0])
            m, n = divmod(int(flat[k]), r.shape[1])
            r[m, n] = values[v]
            flat = np.delete(flat, k)
            done.append(f"residual scaled: {event}")
    return done


def unreachable(stages: Sequence[str], params: EpilogueParams) -> set[str]:
    """The events of ``stages`` that no input can reach, as :func:`coverage` names them.

    Only the scaled add has such events: its bounds may lie beyond every sum the range of its
    input allows (after a ReLU, ``x >= 0``, a small residual scale may never bring the sum
    below ``res_lo``). Found by trying every ``x`` of the range the stages before leave
    (:meth:`hwgen.stages.StageSpec.output_range`) with every int8 residual.
    """
    lo, hi = INT32_MIN, INT32_MAX
    for stage in stages:
        if stage == "residual" and params.residual_op == "scaled" and hi - lo < 1 << 12:
            x, r = np.meshgrid(np.arange(lo, hi + 1, dtype=np.int64),
                               np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64))
            events = stage_events(stage, x, params, {"residual": r})
            return {f"residual scaled: {e}" for e, where in events.items() if not where.any()}
        lo, hi = SPECS[stage].output_range(lo, hi, params.stage(stage))
    return set()
