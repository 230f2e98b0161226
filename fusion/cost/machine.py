"""The timing of each unit of the accelerator, as rules on the cycles they are next free.

:class:`Machine` keeps, for the sequencer and every unit behind it, the cycle it is next free,
and advances them instruction by instruction (register and CSR writes, a LOAD, a MATMUL, an
EPIPASS, a WAIT; a grid of jobs as the templates' hardware loops run it). The rules are read
off the gateware (``hwgen/``) and ``docs/hardware.md``; their constants are the contract's
(:mod:`hwgen.timing`), which the gateware is built from or names at the registers they count:

- **sequencer**: one instruction a cycle, no branch penalty (both possible next words are
  fetched ahead, :mod:`hwgen.gateware.sequencer`); a WAIT retires the cycle after its
  units are idle (it sees their flags registered), or at once if they were idle before it.
  A counted WAIT (``left`` = n) retires the cycle after every LOAD but the newest n has
  finished (the cycle after its last row is written: a cycle before the engine's idle flag
  drops, :data:`LOAD_TAIL`) and every job but the newest n has read its operands (a
  MATMUL's last slice issued).
- **queues**: a command reaches its unit :data:`ISSUE_LATENCY` cycles after it retires (a
  buffered FIFO, then the unit's command register); the job queue holds
  :data:`QUEUE_DEPTH` jobs, so the sequencer runs at most that far ahead of the array. A
  full queue has room again the cycle after its unit took the oldest entry (the FIFO's
  memory refills its output register that cycle; its level drops the next).
- **load engine**: a LOAD (or LOADW) starts requesting once the one before has made its last
  request (their words overlap in flight, up to :data:`~hwgen.gateware.dma.CONTEXTS`
  commands), and the load queue holds :data:`QUEUE_DEPTH` commands, so the sequencer runs at
  most that far ahead. It requests a word a cycle, or one every ``port_bytes / row_bytes``
  cycles when a word holds several scratchpad rows (the gearbox rate), so ``b`` bytes take
  ``b / min(port_bytes, row_bytes)`` cycles; the engine is idle (``WAIT LOAD``) the port
  latency and :data:`LOAD_TAIL` after that.
- **array**: a k-slice a cycle, back to back across MATMULs. A tile is complete
  :func:`~hwgen.timing.array_latency` cycles after its final slice and drains a row a cycle, from
  :data:`TILE_GAP` cycles later, into the epilogue's stage registers (each stage's
  ``latency``, :mod:`hwgen.stages`). With lane sharing (``epilogue_share`` = P) a row is P
  beats of ``cols / P`` lanes, a beat a cycle, and everything below counts beats.
- **store unit**: takes a beat every ``max(1, lanes * lane_bytes / port_bytes)`` cycles (a
  word a cycle on the write port); when it falls behind, beats wait in the epilogue's
  queue, and the drain holds once the epilogue has no credit left (``epilogue_credits``
  beats inside: its stage registers and one).
- **transposing store** (MATMUL ``tr``, :mod:`hwgen.gateware.transpose`): the rows go into
  one of two tile buffers as they would go to the store; once the tile's last row is in, the
  store takes its ``C`` columns (P beats each) from the next cycle, at the store's rate. A
  buffer is free again the cycle after its last column left; until then the next-but-one
  tile waits in the epilogue's queue.
- **stall rule**: only one finished tile drains at a time, so a tile's final slice waits
  until the previous tile's last row has entered the epilogue (``stall_epilogue``).
- **tile flags** (``load dst=z``, BZT): a flag load runs like a LOAD of whole-word rows; a
  BZT retires once its flag's load has finished (the rule: the hardware's flag is there a
  few cycles after its word arrives, but every program waits for its flag loads before its
  BZTs, so only the finished load binds), and a branch taken costs no cycle. A tile with
  ``zf`` holds the store one cycle longer after its last beat (its flag word).
- **epilogue passes**: an EPIPASS starts once the array has drained and the previous pass's
  rows are in, and streams its rows like a drain.
- **window unit** (WINDOW, :mod:`hwgen.gateware.window`): a tile's columns
  (:func:`~hwgen.timing.window_columns`) read one a cycle, back to back across WINDOWs, from
  once the array and any pass are done; its last row is computed
  :data:`~hwgen.timing.WINDOW_STAGES` cycles after its last column and the tile drains like an
  array tile from the next cycle. A tile computed while the one before still drains holds the
  whole unit until that drain is done. A MATMUL or an EPIPASS waits for the unit to be idle.

Each rule is exact for its unit in isolation: the micro-benchmarks in
``tests/fusion/cost/test_machine.py`` (single phases, measured on Verilator) pin them down.
"""

from __future__ import annotations

from collections.abc import Callable

from fusion.cost.memory import MemoryModel
from fusion.cost.shared_port import JOIN_GAP, SharedPort
from hwgen.config import VariantConfig
from hwgen.isa import MAX_LEFT
from hwgen.stages import epilogue_credits, epilogue_latency
from hwgen.timing import (
    ISSUE_LATENCY,
    LOAD_TAIL,
    QUEUE_DEPTH,
    TILE_GAP,
    WINDOW_STAGES,
    array_latency,
)
from hwgen.timing import (
    LOAD_CONTEXTS as CONTEXTS,
)


class Machine(SharedPort):
    """The cycle at which each unit is next free, advanced instruction group by group.

    Times count from ``start`` (the first instruction retires at cycle 0). The methods are
    the microcode's phases; :func:`fusion.cost.analytical.estimate` calls them in the order
    a kernel's program would. Each is exact for the unit it models when the program is one
    such phase (the micro-benchmarks in ``tests/fusion/cost/test_machine.py``).
    """

    #: The times the machine keeps (cycles), and the totals it accumulates.
    TIMES = ("seq", "dma", "dma_take", "dma_issue", "feed_end", "clear", "pass_free", "store",
             "idle", "turn0", "turn1", "w_free", "w_clear", "w_computed", "w_capture", "w_read",
             "req_from", "last_write")
    TOTALS = ("load_busy", "bytes_loaded", "bytes_stored", "stall", "instret", "loads",
              "drains", "words_seq", "words_bank", "words_row")

    def __init__(self, config: VariantConfig, memory: MemoryModel | None = None) -> None:
        c = config
        self.memory = memory  # a DRAM port (fusion.cost.memory); None: the ideal memory
        self.latency = memory.read_latency if memory is not None else c.port_latency
        self.c, self.R, self.C, self.W = c, c.rows, c.cols, c.port_bytes
        # a row is P beats of `lanes` lanes through the epilogue and to the store
        self.P, self.lanes = c.epilogue_share, c.epilogue_lanes
        self.L = array_latency(c)
        self.E = epilogue_latency(c.epilogue)  # cycles through the stage registers
        self.F = epilogue_credits(c.epilogue)  # beats inside the epilogue at most
        self.seq = 0  # cycle the next instruction retires
        # The units a WAIT looks at were idle before the start (a WAIT sees their flags a
        # cycle late: one at word 0 retires at once)
        self.dma = -1  # cycle the load engine is next idle
        self.dma_take = 0  # first cycle the engine may take the next load
        self.dma_issue = 0  # first cycle the next load may make its first request
        self.loads_taken: list[int] = []  # cycles after the last QUEUE_DEPTH loads were taken
        self.rows_started: list[int] = []  # cycles the last CONTEXTS loads' first rows came
        self.feed_end = -1  # cycle after the last slice issued (feed idle)
        self.clear = 0  # cycle the draining tile's last row has entered the epilogue
        self.pass_free = 0  # cycle the compute unit may take the next epilogue pass
        self.store = 0  # cycle the store unit may take its next row
        self.idle = -1  # cycle the compute unit (array, epilogue, store) is idle
        self.turn0 = self.turn1 = 0  # cycles the transposer's next two tile buffers are free
        self.w_free = 0  # cycle the window unit may read the next WINDOW's first column
        self.w_clear = 0  # first cycle the window unit's drain registers are free again
        # the last WINDOW's last row: computed, and moved to the drain registers (later when
        # the tile before still drained: the unit held from the one to the other)
        self.w_computed = self.w_capture = 0
        self.w_read = -1  # cycle the window unit has read every scratchpad row it will
        self.taken: list[int] = []  # cycles after the last QUEUE_DEPTH jobs left the queue
        # cycles the newest loads stop counting for a counted WAIT (their last row is in),
        # and the newest jobs (they have read their operands), oldest first
        self.loads_done: list[int] = []
        self.jobs_fed: list[int] = []
        self.load_busy = self.bytes_loaded = self.bytes_stored = self.stall = 0
        self.instret = 0  # instructions retired (the ``instret`` counter)
        self.flags_ready: list[int] = []  # the queued tile flags: when each can be taken
        # the traffic, for a learned model to weigh what this model does not (docs of
        # fusion.cost.memory): LOADs, row streams to the store (tiles and passes drained),
        # and on a DRAM port the words requested by class (sequential, bank change, row
        # conflict: MemoryModel.load_classes)
        self.loads = self.drains = self.words_seq = self.words_bank = self.words_row = 0
        # A DRAM port is shared: stores cut into the loads' request streams, and a LOAD's
        # first word costs what its relation to the read before does (fusion.cost.memory).
        # The walk of a program knows the addresses (``addr``, ``out``); the walk of a
        # template context knows only which register a LOAD reads through (``source``).
        self.req_from = 0  # first request of the run of loads now requesting
        # drains whose writes no load has paid for yet: (first write, last write, cost)
        self.pending: list[tuple[int, int, float]] = []
        self.last_write = 0  # cycle of the last store
        self.last_source: object = None
        self.read: tuple[int, int, int, int, int, int] | None = None  # the newest load's
        # (addr, count, len, stride, first request, span), to find the word it reads when
        self.open_rows: dict[int, int] = {}  # bank -> open row (walks of programs only)
        # the DRAM accesses whose addresses the walk knows (walks of programs), in the order
        # it makes them, for a replay of the banks' rows (fusion.cost.activations): a LOAD's
        # ("load", (addr, count, len, stride, first request, span)), a drain's
        # ("store", (out, words, first write, last write))
        self.accesses: list[tuple[str, tuple]] = []

    # -- repetition --------------------------------------------------------------------------

    def _settle(self) -> tuple[int, ...]:
        """Move every time already past up to ``seq - 1`` and return the times relative to
        ``seq``.

        Each rule takes the max of a unit's time plus c with a time at or after ``seq`` plus
        c (a WAIT: the unit's time plus one with ``seq``), so a time before ``seq`` is as
        good as ``seq - 1``: what follows depends only on the result.
        """
        past = self.seq - 1
        for name in self.TIMES:
            setattr(self, name, max(getattr(self, name), past))
        self.taken = [max(t, past) for t in self.taken]
        self.loads_taken = [max(t, past) for t in self.loads_taken]
        self.rows_started = [max(t, past) for t in self.rows_started]
        self.loads_done = [max(t, past) for t in self.loads_done]
        self.jobs_fed = [max(t, past) for t in self.jobs_fed]
        queues = (self.taken, self.loads_taken, self.rows_started, self.loads_done,
                  self.jobs_fed)
        return tuple(getattr(self, n) - self.seq for n in self.TIMES) + tuple(
            tuple(t - self.seq for t in q) for q in queues) + (self.last_source,) + tuple(
            (max(a, self.seq) - self.seq, max(b, self.seq) - self.seq, c)
            for a, b, c in self.pending)

    def repeat(self, count: int, body: Callable[[], None]) -> None:
        """Run ``body`` ``count`` times. The rules are max-plus (shift every time by d and
        every result shifts by d), so once a run leaves the times where the run before left
        them, relative to the sequencer, every further run moves them all by the same amount
        and adds the same totals: the rest is extrapolated. That keeps the estimate of a
        GEMM with thousands of tiles at milliseconds."""
        rel = self._settle()
        totals = [getattr(self, n) for n in self.TOTALS]
        seq = self.seq
        for done in range(1, count + 1):
            body()
            rel_after = self._settle()
            totals_after = [getattr(self, n) for n in self.TOTALS]
            left = count - done
            if rel_after == rel and left:
                shift = (self.seq - seq) * left
                for name in self.TIMES:
                    setattr(self, name, getattr(self, name) + shift)
                self.taken = [t + shift for t in self.taken]
                self.loads_taken = [t + shift for t in self.loads_taken]
                self.rows_started = [t + shift for t in self.rows_started]
                self.loads_done = [t + shift for t in self.loads_done]
                self.jobs_fed = [t + shift for t in self.jobs_fed]
                self.pending = [(a + shift, b + shift, c) for a, b, c in self.pending]
                for name, a, b in zip(self.TOTALS, totals_after, totals, strict=True):
                    setattr(self, name, a + (a - b) * left)
                return
            rel, totals, seq = rel_after, totals_after, self.seq

    # -- the store unit ----------------------------------------------------------------------

    def store_cycles(self, lane_bytes: int) -> float:
        """Cycles the store unit spends on one beat (``epilogue_lanes`` lanes of
        ``lane_bytes``); on a DRAM port no fewer than the port takes to write them (a
        fraction: a drain's beats are rounded once, together)."""
        s = max(1, self.lanes * lane_bytes // self.W)
        if self.memory is None:
            return s
        return max(s, self.memory.store_cycles(self.lanes * lane_bytes / self.W))

    def _stream(self, first: int, rows: int, lane_bytes: int, tr: bool = False,
                out: int | None = None, zf: bool = False) -> int:
        """Rows offered to the epilogue from ``first``, a beat a cycle (a row is ``P`` beats
        with lane sharing); returns the cycle after the last beat entered. The store takes
        beat j ``E`` cycles after it enters, at most one every ``s`` cycles; when it falls
        behind, the beats wait in the epilogue's queue, and a beat enters only with a credit
        (``F`` beats inside at most, :func:`hwgen.stages.epilogue_credits`): beat j enters
        the cycle after beat ``j - F`` leaves. Transposed (``tr``), a tile buffer takes the
        beats instead, one a cycle, and the store its columns (``P`` beats each) once the
        last row is in."""
        s = self.store_cycles(lane_bytes)
        beats = rows * self.P
        if tr:
            st0 = max(first + self.E, self.turn0)  # the buffer this tile fills is free
            full = st0 + beats  # the tile is whole; its columns go out from here
            w0 = max(full, self.store)  # its first column's write
            st_last = w0 + round((self.C * self.P - 1) * s)
            self.turn0, self.turn1 = self.turn1, st_last + 1
            step = 1
        else:
            st0 = max(first + self.E, self.store)
            st_last = st0 + round((beats - 1) * s)
            step = s
            w0 = st0
        enter_last = first + beats - 1
        if beats - 1 - self.F >= 0:
            enter_last = max(enter_last, st0 + round((beats - 1 - self.F) * step) + 1)
        if self.memory is not None:
            beat_bytes = self.lanes * lane_bytes  # a row's (or column's) beat stored
            self._writes(w0, st_last, rows * self.C * lane_bytes / self.W,
                         spacing=self.W / beat_bytes * s if beat_bytes < self.W else 1.0,
                         joined=w0 <= self.store + JOIN_GAP, out=out)
        self.store = st_last + round(s) + zf  # a flagged tile: its flag word after it
        self.idle = max(self.idle, self.store + 1)
        self.bytes_stored += rows * self.C * lane_bytes
        self.drains += 1
        return enter_last + 1

    def _job(self) -> int:
        """The sequencer issues a job: returns the cycle its unit takes it. The job queue
        holds QUEUE_DEPTH jobs, so the sequencer waits while it is full."""
        retire = self.seq
        if len(self.taken) == QUEUE_DEPTH:
            retire = max(retire, self.taken[0])
        self.seq = retire
        return retire + ISSUE_LATENCY - 1

    def _took(self, cycle: int) -> None:
        """A job left the queue at ``cycle``: a full queue has room again the cycle after
        (the buffered FIFO refills its output register from its memory that cycle, and the
        memory's level drops the next), as for loads."""
        self.taken = (self.taken + [cycle + 1])[-QUEUE_DEPTH:]

    # -- instructions ----------------------------------------------------------------------

    def instrs(self, n: int) -> None:
        """``n`` instructions that retire one a cycle (register writes, CSR writes, branches)."""
        self.seq += n
        self.instret += n

    def wait(self, load: bool = False, feed: bool = False, epi: bool = False,
             left: int = 0) -> None:
        """A WAIT on the units named; ``left`` > 0: a counted WAIT (the load and feed units'
        newest ``left`` commands may still pend). The sequencer sees the units' flags a cycle
        late (registered), so a WAIT retires the cycle after they are done, or at once when
        they were done before it came."""
        t = self.seq
        if left:
            if load and len(self.loads_done) > left:
                t = max(t, self.loads_done[-left - 1] + 1)
            if feed and len(self.jobs_fed) > left:
                t = max(t, self.jobs_fed[-left - 1] + 1)
        else:
            t = max(t, self.dma + 1) if load else t
            t = max(t, self.feed_end + 1, self.w_read + 1) if feed else t
        t = max(t, self.idle + 1) if epi else t
        self.seq = t
        self.instrs(1)

    def _fed(self, cycle: int) -> None:
        """A job stops counting for a counted WAIT FEED at ``cycle``."""
        self.jobs_fed = (self.jobs_fed + [cycle])[-MAX_LEFT - 1:]

    def load(self, nbytes: int, row_bytes: int, setup: int = 0, row_words: int = 0,
             pattern: tuple[int, int, int] | None = None, *, source: object = None,
             addr: int | None = None) -> None:
        """A LOAD of ``nbytes`` into scratchpad rows of ``row_bytes``, after ``setup``
        register instructions. A word a cycle, or a row a cycle when a word holds several
        (the gearbox rate), then the port latency. ``row_words``: a window load's words a
        row (its row is written once they are all in). On a DRAM port (``memory``) each
        request waits as :meth:`fusion.cost.memory.MemoryModel.load_cycles` prices the
        ``pattern`` (``count``, ``len``, ``stride`` in words; one run of words if None)."""
        self.instrs(setup)
        retire = self.seq  # the load queue holds QUEUE_DEPTH commands
        if len(self.loads_taken) == QUEUE_DEPTH:
            retire = max(retire, self.loads_taken[0])
        self.seq = retire
        # the engine takes it from the queue once it shows there, once the load before
        # makes its last request, and once a response context is free
        take = max(retire + ISSUE_LATENCY - 1, self.dma_take)
        if len(self.rows_started) == CONTEXTS:
            take = max(take, self.rows_started[0] + 1)
        # its first request: the cycle after, and no sooner than the load before's interval
        gap = max(1, self.W // row_bytes)  # the issue interval
        issue = -(-nbytes // min(self.W, row_bytes))
        words = -(-nbytes // self.W)
        if self.memory is None:
            start = max(take + 1, self.dma_issue)
            self.dma_take = start + gap * (words - 1)  # its last request
        else:
            count, length, stride = pattern or (1, words, words)
            relation = self._relation(source, addr)
            first, rest = self.memory.load_cycles(count, length, stride, gap,
                                                  self.memory.first_extra(relation))
            seq, bank, row = self.memory.load_classes(count, length, stride)
            # the first word: sequential when it continues the read before, else a change
            self.words_seq += seq + (relation == "continues")
            self.words_bank += bank + (relation != "continues")
            self.words_row += row
            chained = self.dma_issue - gap + first  # right after the load before
            start = max(take + 1, chained)
            if start > chained:  # the port's reads had stopped: a new run of them
                self.req_from = start
            # drains still writing when it starts, or starting before its last request:
            # the share of their writes from then on; drains after it wait for the next
            end = start + rest
            rest += round(sum(c * min(1.0, (b - start + 1) / (b - a + 1))
                              for a, b, c in self.pending if b >= start and a <= end))
            self.pending = [(a, b, c) for a, b, c in self.pending if a > end]
            self.dma_take = start + rest
            issue = rest + gap
            self.read = (addr, count, length, stride, start, rest + gap)
            self.last_source = source
            if addr is not None:
                self._opened(addr, count, length, stride)
                self.accesses.append(("load", self.read))
        self.dma_issue = self.dma_take + gap
        first_row = row_words or max(1, row_bytes // self.W)
        self.rows_started = (self.rows_started + [start + self.latency
                                                  + first_row - 1 + 1])[-CONTEXTS:]
        # a full queue has room again the cycle after the engine took (the buffered FIFO
        # refills its output register from its memory that cycle, and the memory's level
        # drops the next)
        self.loads_taken = (self.loads_taken + [take + 1])[-QUEUE_DEPTH:]
        end = start + issue + self.latency + LOAD_TAIL
        self.loads_done = (self.loads_done + [end - 1])[-MAX_LEFT - 1:]
        self.load_busy += max(0, end - max(start, self.dma))  # busy time, overlaps once
        self.dma = max(self.dma, end)
        self.bytes_loaded += nbytes
        self.loads += 1
        self.instrs(1)

    def flag_load(self, words: int, **load) -> None:
        """A ``load dst=z`` of ``words`` tile flags (a LOAD of whole-word rows): each flag
        can be taken by a BZT once the load has finished."""
        self.load(words * self.W, self.W, **load)
        self.flags_ready += [self.loads_done[-1]] * words

    def bzt(self) -> None:
        """A BZT on the oldest flag: it retires once the flag is there (:meth:`flag_load`),
        taken or not (a branch costs no cycle)."""
        if not self.flags_ready:
            raise ValueError("a BZT with no tile flag loaded before it: the program would "
                             "wait forever")
        self.seq = max(self.seq, self.flags_ready.pop(0) + 1)
        self.instrs(1)

    def matmul(self, k: int, last: bool, lane_bytes: int, tr: bool = False,
               out: int | None = None, zf: bool = False) -> None:
        """One MATMUL of ``k`` slices. Slices stream back to back; a tile-ending slice waits
        until the previous tile has drained (the stall rule). ``tr``: stored transposed."""
        take = self._job()
        start = max(take + 1, self.feed_end, self.w_clear + 1)
        self._took(start - 1)
        self.instrs(1)
        if not last:
            self.feed_end = start + k
            self.idle = max(self.idle, self.feed_end + 1)
            self._fed(self.feed_end)
            return
        final = max(start + k - 1, self.clear)
        self.stall += final - (start + k - 1)
        self.feed_end = final + 1
        self._fed(self.feed_end)
        self.clear = self._stream(final + self.L + TILE_GAP, self.R, lane_bytes, tr, out, zf)

    def epipass(self, rows: int, lane_bytes: int, out: int | None = None) -> None:
        """One EPIPASS of ``rows`` rows: it starts once the array has drained and the
        previous pass's rows are in, and streams its rows like a drain."""
        take = self._job()
        start = max(take + 1, self.pass_free + 1, self.clear + 1, self.feed_end + 1,
                    self.w_clear + 1)
        self._took(start - 1)
        self._fed(start)  # a pass leaves the count when the compute unit takes it
        self.pass_free = self._stream(start, rows, lane_bytes, out=out)
        self.instrs(1)

    def window(self, columns: int, lane_bytes: int, tr: bool = False,
               out: int | None = None) -> None:
        """One WINDOW tile reading ``columns`` columns (:func:`hwgen.timing.window_columns`):
        it starts once the array has drained, any pass is in and the WINDOW before has read
        its last column; its last row is computed WINDOW_STAGES cycles after its own last
        column, or, while the tile before still drains, once that drain is done (the unit
        holds until then, and so does every WINDOW behind it)."""
        take = self._job()
        start = max(take + 1, self.w_free, self.clear + 1, self.pass_free + 1,
                    self.feed_end + 1)
        self._took(start - 1)
        if start <= self.w_computed:  # started before the hold: its reads wait it out
            start += self.w_capture - self.w_computed
        elif start <= self.w_capture:  # the unit takes no job while it holds
            start = self.w_capture + 1
        self.instrs(1)
        computed = start + columns - 1 + WINDOW_STAGES
        capture = max(computed, self.w_clear)
        self.stall += capture - computed
        self.w_free = start + columns
        self.w_computed, self.w_capture = computed, capture
        self.w_read = capture + 1
        self._fed(self.w_read)
        self.w_clear = self._stream(capture + 1, self.R, lane_bytes, tr, out)

    def grid(self, job: Callable[[], None], *, n_outer: int = 1, n_inner: int = 1,
             setup: int = 0, head: int = 0, per_inner: int = 0, per_outer: int = 0) -> None:
        """An ``n_outer`` x ``n_inner`` grid of one job (macro ``grid`` of ``common.j2``):
        ``setup`` instructions, then per outer iteration ``head`` instructions, the inner
        loop (the job, then ``per_inner`` instructions) and ``per_outer`` instructions."""

        def tile() -> None:
            job()
            self.instrs(per_inner)

        def row() -> None:
            self.instrs(head)
            self.repeat(n_inner, tile)
            self.instrs(per_outer)

        self.instrs(setup)
        self.repeat(n_outer, row)
