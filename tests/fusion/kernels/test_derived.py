"""Facts derived from kernels' parameters kept on disk (:mod:`fusion.kernels.derived`): the
same answer with the store, without it and after it is damaged; a second process-level ask
reads the entry instead of deriving; the store never makes a command fail."""

import json

import pytest

from fusion.kernels import derived
from fusion.kernels.conv import features, program
from fusion.kernels.conv.params import ConvGeometry, ConvParams
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES

V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES)
#: A 3x3 layer of ResNet-8's shape: its plain program needs a search of chunk widths.
LAYER = ConvParams(N=1, H=16, W=16, Cin=16, Cout=32, kh=3, kw=3, pads=(1, 1, 1, 1),
                   stages=("bias", "requant", "relu"))


@pytest.fixture
def store(tmp_path):
    derived.use(tmp_path / "derived")
    yield tmp_path / "derived"
    derived.use(None)


def _fresh():
    """Forget what this process derived, as a new command would."""
    for memo in (program.plain_plan, program.chunk_loop, program.b_prefetch, features._cycles):
        memo.cache_clear()


def test_the_store_gives_what_deriving_gives_and_is_read_back(store, monkeypatch):
    _fresh()
    geo = ConvGeometry(V8, LAYER)
    plan, cycles = program.plain_plan(geo), features._cycles(V8, LAYER)
    assert len(list((store / "conv_plain_plan").glob("*.json"))) == 1
    derived.use(None)
    _fresh()
    assert (program.plain_plan(geo), features._cycles(V8, LAYER)) == (plan, cycles)
    derived.use(store)
    _fresh()
    # read back, not derived: deriving now would fail
    monkeypatch.setattr(program, "_plain_plan", lambda g: pytest.fail("derived again"))
    assert program.plain_plan(geo) == plan and isinstance(plan, tuple)


def test_chunk_loops_and_prefetching_are_kept_and_read_back(store, monkeypatch):
    # what a build asks of a convolution (conv.program.schedule), each assembling programs
    _fresh()
    geo = ConvGeometry(V8, LAYER)
    loops = [program.chunk_loop(geo, tn) for tn in (1, 2)]
    prefetch = program.b_prefetch(geo)
    assert len(list((store / "conv_chunk_loop").glob("*.json"))) == 2
    assert len(list((store / "conv_b_prefetch").glob("*.json"))) == 1
    _fresh()
    monkeypatch.setattr(program, "_chunk_loop", lambda *a: pytest.fail("derived again"))
    monkeypatch.setattr(program, "_b_prefetch", lambda g: pytest.fail("derived again"))
    assert [program.chunk_loop(geo, tn) for tn in (1, 2)] == loops
    assert program.b_prefetch(geo) == prefetch
    monkeypatch.undo()
    derived.use(None)
    _fresh()
    assert [program.chunk_loop(geo, tn) for tn in (1, 2)] == loops
    assert program.b_prefetch(geo) == prefetch


@pytest.mark.parametrize("damage", [
    b"{not json", b'{"key": "other", "value": 5}', b'{"value": [1, true]}', b"[]",
    b'{"key": "K", "value": -3}', b'{"key": "K", "value": "many"}',
    b'{"key": "K", "value": 1.5}', b'{"key": "K", "value": true}', b" " * 5000])
def test_a_damaged_entry_is_derived_again_and_replaced(store, damage):
    calls = []

    def derive():
        calls.append(1)
        return 1234

    value = derived.cycles("t_cycles", V8, LAYER, None, derive)
    [entry] = (store / "t_cycles").glob("*.json")
    key = json.loads(entry.read_text())["key"]
    entry.write_bytes(damage.replace(b'"K"', json.dumps(key).encode()))
    assert derived.cycles("t_cycles", V8, LAYER, None, derive) == value == 1234
    assert len(calls) == 2 and json.loads(entry.read_text()) == {"key": key, "value": 1234}
    assert derived.cycles("t_cycles", V8, LAYER, None, derive) == 1234 and len(calls) == 2


def test_other_parameters_are_other_entries(store):
    a = derived.cycles("t_cycles", V8, LAYER, None, lambda: 1)
    b = derived.cycles("t_cycles", V8, ConvParams(**{**LAYER.__dict__, "Cout": 16}), None,
                       lambda: 2)
    assert (a, b) == (1, 2) and len(list((store / "t_cycles").glob("*.json"))) == 2


def test_a_store_that_cannot_be_written_only_derives(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    derived.use(blocked / "derived")
    try:
        assert derived.cycles("t_cycles", V8, LAYER, None, lambda: 7) == 7
        assert derived.cycles("t_cycles", V8, LAYER, None, lambda: 7) == 7
    finally:
        derived.use(None)
