"""Settings shared by every test."""

from hypothesis import HealthCheck, settings

# Tests check behaviour, not time: Hypothesis's per-example deadline fails a property test
# when another xdist worker is compiling Verilator next to it. Speed is `make bench`'s job.
settings.register_profile("hwgen", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hwgen")
