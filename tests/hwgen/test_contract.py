"""The hardware/compiler contract is defined once: no copy of a shared constant reappears.

Every constant the gateware and the compiler must agree on has one home among the contract
modules (``hwgen/timing.py``, ``hwgen/perf.py``, ``hwgen/stages.py``, ``hwgen/config.py``,
``hwgen/isa.py``), and both sides import it. This test scans the sources of ``hwgen/``,
``fusion/``, ``sim/``, ``bench/`` and the templates for the spellings a copy would take.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("hwgen", "fusion", "sim", "bench", "rtl_templates")
SUFFIXES = {".py", ".j2", ".v", ".sv"}


def _definition(*names: str) -> str:
    return r"^\s*(" + "|".join(names) + r")\s*(:[^=]*)?=[^=]"


#: (what, pattern, the only files where it may appear)
RULES = [
    ("pipeline timing constants", _definition("QUEUE_DEPTH", "QUEUE_LATENCY", "ISSUE_LATENCY",
                                              "TILE_GAP", "LOAD_TAIL"), {"hwgen/timing.py"}),
    ("the array latency formula", r"(?<!\* )rows \+ [\w.]*cols\b", {"hwgen/timing.py"}),
    ("performance counter names and width", _definition("COUNTERS", "COUNTER_BITS"),
     {"hwgen/perf.py"}),
    ("the stage list", _definition("EPILOGUE_STAGES"), {"hwgen/config.py"}),
    ("bias-group row offsets", r"\bbias\s*\+\s*\d", set()),
    ("the bias-group size", _definition("BIAS_GROUP_ROWS"), {"hwgen/stages.py"}),
    ("WAIT unit bits (use hwgen.isa.Unit)", r"units\s*=\s*\d", set()),
    ("control-register names (declared by the stage specs)",
     r"[\"'](req_mult|req_shift|req_zp|req_mode|res_mode)[\"']", {"hwgen/stages.py"}),
    ("the control-register numbers", r"^\s*(REQ_MULT|REQ_SHIFT|REQ_ZP|CLAMP_LO|CLAMP_HI|REQ_MODE"
                                      r"|RES_MODE)\s*=", set()),
    ("hand-counted template instructions (derive them from the template context)",
     _definition(r"\w*_INSTRS"), set()),
    ("hand-counted CSR writes (count fusion.kernels.epilogue.csr_writes)",
     r"\(\d+ if per_channel else \d+\)", set()),
]


def _sources() -> list[Path]:
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*")
                  if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts)


@pytest.mark.parametrize("what, pattern, homes", RULES, ids=[r[0] for r in RULES])
def test_shared_constants_have_one_home(what, pattern, homes):
    regex = re.compile(pattern, re.MULTILINE)
    found = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel in homes:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if regex.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, (f"{what} copied outside {', '.join(sorted(homes)) or 'the contract'} "
                       f"(import it from there):\n" + "\n".join(found))


def test_each_home_defines_what_the_rules_protect():
    # a rule whose home lost its definition would pass vacuously
    for what, pattern, homes in RULES:
        for home in homes:
            assert re.search(pattern, (ROOT / home).read_text(), re.MULTILINE), (what, home)


@pytest.mark.parametrize("line", [
    "QUEUE_DEPTH = 4", "    TILE_GAP: int = 2", "wait units=4    # epilogue idle",
    "self.pc_mult_addr.eq(self.i.payload.bias + 1)", 'writes += [("req_mult", 3)]',
    "GEMM_INIT_INSTRS = 8", "self.L = c.rows + c.cols",
    'csrs = (2 if per_channel else 4) * ("requant" in stages)',
])
def test_the_rules_catch_a_copy(line):
    assert any(re.search(pattern, line, re.MULTILINE) for _, pattern, _ in RULES), line
