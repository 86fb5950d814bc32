"""What every benchmark in bench/ shares, written once: contenders timed in interleaved rounds,
the minimum and the median of those rounds, the load average around the run, and the tables.

A sceptic's rules, which every bench follows through this module:

- contenders are timed round by round, never one after the other: round r times every
  contender once, in an order that rotates by one each round (so each goes first in turn), and
  whatever load the shared machine has at that moment falls on all of them alike;
- at least ``MIN_ROUNDS`` rounds, each reported as its minimum (the cost with the least
  interference) and its median (the typical cost), and every ratio is given for both;
- warm rounds: each contender runs once untimed before the first round, and no round is timed
  straight after ``gc.collect()`` (a collection before a single call times an empty heap no
  program ever runs with);
- the load average is printed at the start and at the end, but it judges nothing: it counts
  the benchmark's own threads (a client and a server keep two CPUs busy) and, for minutes, a
  benchmark that ran just before. What judges a run is the CPU time other work took (the
  kernel's count of busy time, less this process's and its children's) and the time the host
  took from this VM (steal): the start says what they took in the second before it, the end
  what they took during the run, each with a warning line when either is above
  ``OTHER_SHARE`` of the machine: such a run's figures are noisy;
- on a virtual machine that gives freed memory back to its host (virtio-balloon free page
  reporting), the end says how much it gave back during the run, and every table names each
  contender's rounds in which it did, with their median beside the others' (ADR-110): a call
  that allocates fresh memory after such a report faults every page back in from the host,
  and on a VM of 2 CPUs that made a 0.25 s fetch of 512 MiB take 0.5-1.0 s. Such rounds stay
  in the median, as a program on that VM pays for them;
- a round trip wakes one thread of each side, and a VM is slow to wake a virtual CPU that has
  gone idle: on 2 vCPUs a 64-byte get took 11 us while client and server ran on one CPU and
  80-110 us once the scheduler had put them on two, whichever contender that fell on. Tables of
  small round trips are therefore also timed under ``one_cpu()``, where that state is the same
  for every contender.
"""

import contextlib
import os
import statistics
import time
import timeit

MIN_ROUNDS = 5
OTHER_SHARE = 0.05
GIB = 1 << 30
_SCALE = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


# The kernel's count of the KiB free page reporting has given back to the host (Linux's
# page_reporting, as on VMs with a virtio-balloon that reports free pages).
REPORTED_KIB = "/sys/module/page_reporting/parameters/reported_kib"
PROC_STAT = "/proc/stat"
_reported_at_start = None
_cpu_at_start = None


def _cpu_seconds():
    """(busy, steal, own, wall) seconds so far: every CPU's busy time (user, nice, system, irq,
    softirq) and the time the host took from them (steal) from the kernel's count, this
    process's CPU time and its reaped children's, and a monotonic clock; None where the kernel
    does not count (not Linux)."""
    try:
        with open(PROC_STAT) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    tick = os.sysconf("SC_CLK_TCK")
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    return ((user + nice + system + irq + softirq) / tick, steal / tick, own, time.monotonic())


def _reported_kib():
    try:
        with open(REPORTED_KIB) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def load_average(when):
    """Print the 1, 5 and 15 minute load averages, `when` saying at which point of the run
    ("start" or "end"), and the CPU time other work and the host (steal) took: at the "start"
    in the second before it (this call waits that second), at the "end" since the start, each
    with a warning line when either is above ``OTHER_SHARE`` of the machine. At the "end",
    also how much freed memory the machine gave back to its host, where it does."""
    global _reported_at_start, _cpu_at_start
    one, five, fifteen = os.getloadavg()
    cpus = os.cpu_count() or 1
    print(f"# load average at the {when}: {one:.2f} {five:.2f} {fifteen:.2f} on {cpus} CPUs "
          "(it counts this benchmark's threads, and one that ran just before)")
    reported = _reported_kib()
    if when == "start":
        before = _cpu_seconds()
        time.sleep(1.0)
        _cpu_at_start = _cpu_seconds()
        _other_work(before, _cpu_at_start, cpus, "in the second before the start")
        _reported_at_start = reported
        return
    _other_work(_cpu_at_start, _cpu_seconds(), cpus, "during the run")
    if reported is not None and _reported_at_start is not None \
            and reported > _reported_at_start:
        print(f"# this machine gave {(reported - _reported_at_start) / 1024:.0f} MiB of freed "
              "memory back to its host during the run (free page reporting): calls that "
              "allocated fresh memory after it faulted it back in from the host, which raises "
              "medians, not minima")


def _other_work(start, end, cpus, span):
    """Print what other work and the host took of the machine between `start` and `end`
    (_cpu_seconds), `span` naming that time."""
    if start is None or end is None:
        return
    busy, steal, own, wall = (b - a for a, b in zip(start, end))
    other = max(0.0, busy - own)
    capacity = max(wall * cpus, 1e-9)
    print(f"# CPU time {span} ({wall:.0f} s on {cpus} CPUs): this benchmark {own:.1f} s, "
          f"other work {other:.1f} s ({other / capacity:.0%} of the machine), taken by the "
          f"host (steal) {steal:.1f} s ({steal / capacity:.0%})")
    if other > OTHER_SHARE * capacity or steal > OTHER_SHARE * capacity:
        print(f"# WARNING: other work or the host took more than {OTHER_SHARE:.0%} of the "
              f"machine {span}: these figures are noisy; rerun on an idle machine")


def _threads():
    return [int(tid) for tid in os.listdir("/proc/self/task")]


@contextlib.contextmanager
def one_cpu():
    """Run the block with every thread of this process (a server's, a peer's pool) on one CPU,
    the first this process may use; threads started inside inherit it. Afterwards each thread
    is back on the CPUs it had, and threads started inside on the process's. Yields the CPU."""
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    before = {}
    for tid in _threads():
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpu})
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    try:
        yield cpu
    finally:
        for tid in _threads():
            try:
                os.sched_setaffinity(tid, before.get(tid, allowed))
            except ProcessLookupError:
                pass


class Sample:
    """One contender's rounds: wall and CPU seconds (of this process, every thread, user and
    system) per call, one entry a round, and the KiB of freed memory the machine gave back to
    its host while the round ran, `before` included (None where it does not count)."""

    def __init__(self):
        self.wall, self.cpu, self.returned = [], [], []

    @property
    def min(self):
        return min(self.wall)

    @property
    def median(self):
        return statistics.median(self.wall)

    @property
    def cpu_min(self):
        return min(self.cpu)

    def returned_note(self, name, unit="s"):
        """A line naming the rounds in which the machine gave freed memory back to its host
        (free page reporting), with their median against the other rounds', or None where
        no round saw it: a call that allocates memory just given back faults every page of it
        in from the host, which raises the median, not the minimum."""
        hit = [i for i, kib in enumerate(self.returned) if kib]
        if not hit:
            return None
        scale = _SCALE[unit]
        line = (f"{name}: the machine gave {sum(self.returned[i] for i in hit) / 1024:.0f} MiB "
                f"of freed memory back to its host during {len(hit)} of {len(self.wall)} "
                f"rounds, median {_num(statistics.median(self.wall[i] for i in hit) * scale)} "
                f"{unit}")
        rest = [w for i, w in enumerate(self.wall) if i not in hit]
        if rest:
            line += f" against {_num(statistics.median(rest) * scale)} {unit} in the others"
        return line


def interleaved(contenders, rounds, number=1, before=None):
    """Time `contenders` (name -> function of no arguments) in `rounds` interleaved rounds, each
    round of a contender `number` calls; name -> Sample of seconds per call.

    Every contender runs once untimed first (warm code, caches and allocator pools). Round r
    times the contenders in their given order rotated by r. `before(name)`, when given, runs
    untimed before each of `name`'s calls (to remove the file the previous call wrote, say)."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"{rounds} rounds: a median needs at least {MIN_ROUNDS}")
    names = list(contenders)
    for name in names:
        if before is not None:
            before(name)
        contenders[name]()
    samples = {name: Sample() for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn = contenders[name]
            reported = _reported_kib()
            if before is None:
                timer = timeit.Timer(fn)
                c0 = time.process_time()
                wall = timer.timeit(number)
                cpu = time.process_time() - c0
            else:
                wall = cpu = 0.0
                for _ in range(number):
                    before(name)
                    c0, t0 = time.process_time(), time.perf_counter()
                    fn()
                    wall += time.perf_counter() - t0
                    cpu += time.process_time() - c0
            samples[name].wall.append(wall / number)
            samples[name].cpu.append(cpu / number)
            after = _reported_kib()
            samples[name].returned.append(
                None if reported is None or after is None else after - reported)
    return samples


def nothing_kept(name):
    """A `before` for `interleaved`: gives back the memory hurray keeps for reuse
    (hurray.empty_cache, ADR-108) ahead of each call of a contender whose name ends in
    ", nothing kept", so it allocates as the first call of a process does."""
    if name.endswith(", nothing kept"):
        import hurray
        hurray.empty_cache()


def _num(v):
    """Three significant digits, never in exponent form (1160, 825, 0.0906)."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def ratio(x):
    """Two decimals, or two significant digits below 0.1 (0.00025, not 0.00)."""
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"


def versus(sample, ref):
    """`sample` as a multiple of `ref`: minimum against minimum, median against median."""
    return f"{ratio(sample.min / ref.min)}/{ratio(sample.median / ref.median)}"


class Table:
    """Rows of (name, Sample, extra columns), printed with the minimum and the median of each
    row's rounds, its throughput over `nbytes` (when given) at both, its multiple of each
    reference row in `refs` (minimum against minimum, median against median: ``min/median``),
    and with ``cpu=True`` its minimum CPU time (in the same unit) and that as a multiple of the
    first reference's.
    `notes` are lines printed under the title: which peers stand here and at what setting;
    `verdicts` lines printed under the rows (``beaten`` writes them)."""

    def __init__(self, title, refs=(), nbytes=None, extra=(), unit="s", cpu=False, notes=()):
        self.title, self.refs, self.nbytes, self.unit = title, list(refs), nbytes, unit
        self.extra, self.cpu, self.notes = list(extra), cpu, list(notes)
        self.rows, self.verdicts = [], []

    def add(self, name, sample, *extra):
        self.rows.append((name, sample, extra))

    def add_all(self, samples):
        for name, sample in samples.items():
            self.add(name, sample)

    def skip(self, name, why):
        self.rows.append((name, None, (why,)))

    def sample(self, name):
        return next((s for n, s, _ in self.rows if n == name), None)

    def print(self):
        scale = _SCALE[self.unit]
        refs = [r for r in self.refs if self.sample(r) is not None]
        cols = [f"{self.unit} min", f"{self.unit} median"]
        if self.nbytes:
            cols += ["GiB/s min/med"]
        cols += [f"x {r} min/med" for r in refs]
        if self.cpu:
            cols += [f"CPU {self.unit} min"] + ([f"x {refs[0]} CPU"] if refs else [])
        cols += self.extra
        widths = [max(10, len(c)) for c in cols]
        width = max([36] + [len(n) for n, _, _ in self.rows])
        print(f"\n{self.title}")
        for note in self.notes:
            print(f"  ({note})")
        print(f"  {'':{width}}" + "".join(f"  {c:>{w}}" for c, w in zip(cols, widths)))
        for name, s, extra in self.rows:
            if s is None:
                print(f"  {name:{width}}  ({extra[0]})")
                continue
            values = [_num(s.min * scale), _num(s.median * scale)]
            if self.nbytes:
                values.append(f"{self.nbytes / GIB / s.min:.2f}/{self.nbytes / GIB / s.median:.2f}")
            for r in refs:
                values.append(versus(s, self.sample(r)))
            if self.cpu:
                values.append(_num(s.cpu_min * scale))
                if refs:
                    values.append(ratio(s.cpu_min / self.sample(refs[0]).cpu_min))
            values += list(extra)
            print(f"  {name:{width}}" + "".join(f"  {v:>{w}}" for v, w in zip(values, widths)))
        for name, s, _ in self.rows:
            note = s is not None and s.returned_note(name, self.unit)
            if note:
                print(f"  ({note})")
        for line in self.verdicts:
            print(f"  {line}")

    def beaten(self, ours, peers):
        """Say plainly, in the verdicts, which of the rows `peers` beat the row `ours` in the
        minimum or the median of their rounds, and by how much, or that none did."""
        mine = self.sample(ours)
        present = [p for p in peers if self.sample(p) is not None]
        faster = 0
        for peer in present:
            theirs = self.sample(peer)
            if theirs.min < mine.min or theirs.median < mine.median:
                faster += 1
                self.verdicts.append(f"PEER FASTER: {peer} beats {ours}: {ours} takes "
                                     f"{versus(mine, theirs)} times as long (min/median)")
        if present and not faster:
            self.verdicts.append(f"{ours} beats every peer here: {', '.join(present)}")


def print_grid(title, rows, ref, unit="us"):
    """Print `rows` (label -> {contender: Sample}, every row the same contenders) as one line a
    row: each contender's minimum and median, then each other contender's multiple of `ref`'s
    (minimum against minimum, median against median: ``min/median``)."""
    scale = _SCALE[unit]
    names = list(next(iter(rows.values())))
    others = [n for n in names if n != ref]
    cols = [f"{n} {unit} min/med" for n in names] + [f"{n}/{ref} min/med" for n in others]
    widths = [max(14, len(c)) for c in cols]
    width = max(24, *(len(label) for label in rows))
    print(f"\n{title}")
    print(f"  {'':{width}}" + "".join(f"  {c:>{w}}" for c, w in zip(cols, widths)))
    for label, samples in rows.items():
        base = samples[ref]
        values = [f"{_num(samples[n].min * scale)}/{_num(samples[n].median * scale)}"
                  for n in names]
        values += [versus(samples[n], base) for n in others]
        print(f"  {label:{width}}" + "".join(f"  {v:>{w}}" for v, w in zip(values, widths)))
