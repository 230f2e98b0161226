"""The mutation campaign's list keeps up with the code: every patch applies to the current
sources, and one that no longer does fails loudly (no simulator needed)."""

import pytest

from bench import mutate
from bench.mutations import MUTATIONS, Mutation

#: The faults issue 9 asks the campaign to cover, by the word in a mutation's name.
REQUIRED = ("round", "sat", "relu", "clamp", "bias", "mac", "skew", "dma", "loop", "wait",
            "bytes", "residual-mode", "per-channel")


def test_at_least_twelve_documented_mutations_cover_every_required_fault():
    assert len(MUTATIONS) >= 12
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)
    for word in REQUIRED:
        assert any(word in m.name for m in MUTATIONS), word
    assert all(m.doc and m.old != m.new for m in MUTATIONS)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_applies_to_the_current_sources(mutation):
    text = (mutate.ROOT / mutation.path).read_text()
    patched = mutate.patch(mutation, text)
    assert patched != text and mutation.new in patched


def test_a_mutation_whose_text_moved_fails_loudly(tmp_path):
    (tmp_path / "f.py").write_text("x = 1\nx = 1\n")
    for old, count in (("y = 2", 0), ("x = 1", 2)):
        bad = Mutation("moved", "f.py", old, "z", "doc")
        with pytest.raises(mutate.MutationDoesNotApply, match=f"occurs {count} times"):
            mutate.apply(bad, tmp_path)
    assert (tmp_path / "f.py").read_text() == "x = 1\nx = 1\n"


def test_the_checks_are_gemm_shapes_and_every_bundled_example():
    names = [name for name, _ in mutate.checks()]
    # the tiler's shapes, one GEMV streamed (its counted WAITs), the block-sparse ones and
    # the zero-skipping ones
    assert sum(n.startswith("gemm ") for n in names) == len(mutate.GEMMS) + 1 + len(
        mutate.PRUNED) + len(mutate.ZERO_TILES)
    assert sum(n.endswith(" streamed") for n in names) == 1
    pruned = [args for name, args in mutate.checks() if " pruned " in name]
    assert len(pruned) == len(mutate.PRUNED) and all("--prune" in a for a in pruned)
    skipping = [args for name, args in mutate.checks() if " zero tiles " in name]
    assert len(skipping) == len(mutate.ZERO_TILES) and all("--zero-tiles" in a
                                                          for a in skipping)
    examples = sorted(p.stem for p in (mutate.ROOT / "examples").glob("*.onnx"))
    assert [n.removeprefix("run ") for n in names if n.startswith("run ")] == examples


def test_every_mutation_names_a_variant_the_campaign_builds():
    assert {m.variant for m in MUTATIONS} <= set(mutate.VARIANTS)
    # the window variant has the parts its mutants patch, and models that use them
    assert "--window-unit" in mutate.VARIANTS["window"]
    assert all((mutate.ROOT / model).exists() for model in mutate.WINDOW_MODELS)
    assert [name for name, _ in mutate.checks("window")]
