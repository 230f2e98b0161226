import dataclasses
import hashlib
import json
import re

import pytest

from hwgen.config import VariantConfig
from hwgen.platform import DDR3_SPEEDGRADES, MEMORIES, MODULES, PlatformConfig


def test_the_default_is_the_ideal_memory_without_a_module():
    p = PlatformConfig()
    assert (p.memory, p.module, p.speedgrade, p.refresh) == ("ideal", None, None, "normal")
    assert p.clock_hz == 100_000_000 and not p.is_dram and p.refresh_divisor == 1


@pytest.mark.parametrize(("memory", "module", "rate"), [
    ("ddr3", "MT41K128M16", "1:4"), ("sdr", "IS42S16160", "1:1")])
def test_each_dram_memory_has_its_default_module(memory, module, rate):
    p = PlatformConfig(memory=memory)
    assert p.module == module and p.rate == rate and p.is_dram
    # A default filled in is the same platform as one spelled out.
    assert p == PlatformConfig(memory=memory, module=module, speedgrade=p.speedgrade)
    assert p.key() == PlatformConfig(memory=memory, module=module).key()


@pytest.mark.parametrize(("clock_hz", "grade"), [
    (100_000_000, "800"), (50_000_000, "800"), (120_000_000, "1066"), (133_000_000, "1066"),
    (150_000_000, "1333"), (200_000_000, "1600")])
def test_the_default_ddr3_speedgrade_is_the_slowest_that_runs_at_the_clock(clock_hz, grade):
    # 8 transfers a controller cycle at 1:4: the grade (MT/s) must reach clock_hz * 8.
    assert PlatformConfig(memory="ddr3", clock_hz=clock_hz).speedgrade == grade
    assert int(grade) >= clock_hz * 8 / 1e6


def test_hot_refresh_halves_the_refresh_interval():
    assert PlatformConfig(memory="ddr3", refresh="hot").refresh_divisor == 2
    assert PlatformConfig(memory="ddr3", refresh="normal").refresh_divisor == 1
    assert (PlatformConfig(memory="ddr3", refresh="hot").key()
            != PlatformConfig(memory="ddr3").key())


def _exact(message: str) -> str:
    return re.escape(message)


@pytest.mark.parametrize(("fields", "message"), [
    ({"memory": "ddr4"}, "memory must be one of ideal, sdr, ddr3, not 'ddr4'"),
    ({"memory": "ddr3", "module": "IS42S16160"},
     "module must be one of MT41K128M16, MT41K64M16, MT41K256M16 for memory ddr3, "
     "not 'IS42S16160'"),
    ({"memory": "sdr", "module": "MT41K128M16"},
     "module must be one of IS42S16160, MT48LC16M16 for memory sdr, not 'MT41K128M16'"),
    ({"module": "MT41K128M16"}, "module must be None for the ideal memory"),
    ({"refresh": "hot"}, "refresh must be 'normal' for the ideal memory"),
    ({"speedgrade": "800"}, "speedgrade must be None for the ideal memory"),
    ({"memory": "ddr3", "refresh": "warm"}, "refresh must be one of normal, hot, not 'warm'"),
    ({"memory": "ddr3", "speedgrade": "2133"},
     "speedgrade must be one of 800, 1066, 1333, 1600 for memory ddr3, not '2133'"),
    ({"memory": "ddr3", "speedgrade": 800},
     "speedgrade must be one of 800, 1066, 1333, 1600 for memory ddr3, not 800"),
    ({"memory": "ddr3", "speedgrade": "800", "clock_hz": 150_000_000},
     "speedgrade 800 is too slow for clock_hz=150000000 (1200 MT/s at 1:4): use a speedgrade "
     "of at least 1200"),
    ({"memory": "sdr", "speedgrade": "800"}, "speedgrade must be None for memory sdr"),
    ({"clock_hz": 100e6}, "clock_hz must be an integer number of Hz, not 100000000.0"),
    ({"clock_hz": True}, "clock_hz must be an integer number of Hz, not True"),
    ({"memory": "ddr3", "clock_hz": 300_000_000},
     "clock_hz must be from 50000000 to 200000000 for memory ddr3, not 300000000"),
])
def test_a_bad_platform_is_refused_naming_the_field_and_the_allowed_values(fields, message):
    with pytest.raises(ValueError, match=_exact(message)):
        PlatformConfig(**fields)


def test_every_allowed_combination_is_accepted():
    for memory in MEMORIES:
        for module in MODULES.get(memory, (None,)):
            grades = DDR3_SPEEDGRADES if memory == "ddr3" else (None,)
            for grade in grades:
                for refresh in (("normal", "hot") if module else ("normal",)):
                    p = PlatformConfig(memory=memory, module=module, speedgrade=grade,
                                       refresh=refresh)
                    assert PlatformConfig.from_dict(p.to_dict()) == p


def test_round_trip_through_json_keeps_the_key():
    p = PlatformConfig(memory="ddr3", module="MT41K64M16", speedgrade="1333", refresh="hot")
    again = PlatformConfig.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again == p and again.key() == p.key()


def test_the_key_is_the_hash_of_the_canonical_json():
    # Independent of field order, and the same recipe as the variant's key.
    p = PlatformConfig(memory="sdr")
    text = json.dumps(p.to_dict(), sort_keys=True, separators=(",", ":"))
    assert p.key() == hashlib.sha256(text.encode()).hexdigest()[:16]
    v = VariantConfig()
    text = json.dumps(v.to_dict(), sort_keys=True, separators=(",", ":"))
    assert v.key() == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_distinct_platforms_have_distinct_keys():
    platforms = [PlatformConfig(), PlatformConfig(memory="sdr"), PlatformConfig(memory="ddr3"),
                 PlatformConfig(memory="ddr3", refresh="hot"),
                 PlatformConfig(memory="ddr3", speedgrade="1600"),
                 PlatformConfig(memory="ddr3", clock_hz=90_000_000)]
    assert len({p.key() for p in platforms}) == len(platforms)


def test_unknown_keys_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown platform config field.*memroy"):
        PlatformConfig.from_dict({"memroy": "ddr3"})
    with pytest.raises(ValueError, match="a platform config must be a JSON object, not list"):
        PlatformConfig.from_dict(["ddr3"])


def test_the_platform_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PlatformConfig().memory = "ddr3"


def test_the_ideal_memory_has_no_clock_ratio():
    assert PlatformConfig().rate is None
    with pytest.raises(ValueError, match="rate must be None for the ideal memory"):
        PlatformConfig(rate="1:1")


def test_ddr3_at_1_2_is_the_ecp5_phy_and_keeps_the_older_keys():
    # The default ratio is left out of the dict, so the keys of platforms from before the
    # field existed (build folders, descriptors, caches) do not change.
    assert "rate" not in PlatformConfig(memory="ddr3").to_dict()
    assert PlatformConfig(memory="ddr3").key() == PlatformConfig(memory="ddr3", rate="1:4").key()
    half = PlatformConfig(memory="ddr3", rate="1:2", module="MT41K256M16", clock_hz=50_000_000)
    assert half.to_dict()["rate"] == "1:2" and half.key() != PlatformConfig(
        memory="ddr3", module="MT41K256M16", clock_hz=50_000_000).key()
    assert PlatformConfig.from_dict(half.to_dict()) == half
    # 50 MHz at 1:2 is a 100 MHz DRAM clock, 200 MT/s: the slowest grade runs it.
    assert half.speedgrade == "800"
    with pytest.raises(ValueError, match="rate must be one of 1:4, 1:2 for memory ddr3"):
        PlatformConfig(memory="ddr3", rate="1:1")
    with pytest.raises(ValueError, match="rate must be one of 1:1 for memory sdr"):
        PlatformConfig(memory="sdr", rate="1:2")
