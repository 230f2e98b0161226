"""A board whose memory changes while a workload runs, without the runtime being told.

Real hardware drifts: a DDR3 chip above 85 C must refresh twice as often, which slows every
kernel a little, and nothing in the program or the compiler's model knows. :class:`Board`
stands for such a board in simulation: one variant, one Verilator build per platform (the
normal and the hot-refresh DRAM are two builds, cached like any other), and a switch between
them that takes effect at the next simulator launch. The runtime is handed the board where
it would take a build (:func:`sim.run.run_programs`, :func:`fusion.runtime.run.run_compiled`)
and asks it for the build of each launch; it sees a board, not a platform, so a switch is
visible to it only through the cycles it measures. That is what the performance model's
drift detection (the next issue) is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from sim import build as sim_build


@dataclass
class Board:
    """One variant on a memory that can be switched between launches.

    Parameters
    ----------
    config : VariantConfig
        The variant (the same bitstream whatever the memory).
    platform : PlatformConfig
        The memory it starts on.
    root : Path, optional
        The build cache root (:func:`sim.build.default_root` by default).

    Attributes
    ----------
    launches : int
        Simulator launches so far.
    history : list of (int, str)
        ``(launch, platform key)`` of each memory the board ran on, from the launch it
        started at: the truth a drift detector is checked against.
    """

    config: VariantConfig
    platform: PlatformConfig
    root: Path | None = None
    launches: int = 0
    history: list[tuple[int, str]] = field(default_factory=list)
    _scheduled: list[tuple[int, PlatformConfig]] = field(default_factory=list, repr=False)
    _builds: dict[PlatformConfig, sim_build.BuildInfo] = field(default_factory=dict,
                                                                repr=False)

    def __post_init__(self) -> None:
        self.history.append((0, self.platform.key()))

    def build_for(self, platform: PlatformConfig) -> sim_build.BuildInfo:
        """The build of the variant on ``platform`` (made once, then cached)."""
        if platform not in self._builds:
            self._builds[platform] = sim_build.build_variant(self.config, platform=platform,
                                                             root=self.root)
        return self._builds[platform]

    def switch(self, platform: PlatformConfig) -> None:
        """Run the next launches on ``platform`` (built now if it is not yet)."""
        self.build_for(platform)
        if platform != self.platform:
            self.platform = platform
            self.history.append((self.launches, platform.key()))

    def switch_after(self, launches: int, platform: PlatformConfig) -> None:
        """Switch to ``platform`` once ``launches`` more simulator launches have run: a
        workload is switched mid-run without its caller doing anything.

        Raises
        ------
        ValueError
            If ``launches`` is negative.
        """
        if not isinstance(launches, int) or isinstance(launches, bool) or launches < 0:
            raise ValueError(f"launches must be a count, 0 or more, not {launches!r}")
        self.build_for(platform)
        self._scheduled.append((self.launches + launches, platform))

    def launch(self) -> sim_build.BuildInfo:
        """The build for the next simulator launch (applying any switch that is due)."""
        for entry in list(self._scheduled):
            at, platform = entry
            if at <= self.launches:
                self._scheduled.remove(entry)
                self.switch(platform)
        self.launches += 1
        return self.build_for(self.platform)
