"""recursa beside another harness, against the same scripted OpenAI-compatible server.

Every figure is taken through the real CLI and the real daemon, as a user runs
them, on a fresh ``RECURSA_HOME``; the model is the loopback fake server
(``recursa.testing.fake_server``) in its own process, which timestamps when a
reply's last byte left and when the next request arrived. A step's overhead
is that gap: everything the harness does between the model's reply and its
next request (parsing, the store, the cell's round trip through a kernel,
building and sending the request).

Figures:

- per-step overhead over ``--steps`` trivial cells in one turn: median, p90,
  p99 and max (the first step excluded; it is printed alone);
- first step: the first reply's end to the second request (the first cell);
  the many-step run starts as soon as the sampled 10-cell run ends, so when
  the warm spare kernel that run took is not yet replaced (on two busy cores
  a new one takes a few hundred ms), this includes the wait for it;
- 10-cell run: the wall time of ``recursa run`` (a task of 10 cells and an
  answer) with the daemon already running, with nothing else sampling the
  machine;
- cold two-step run: the same for one cell and an answer, with no daemon
  running (the CLI starts it);
- peak memory during a second 10-cell run, sampled every 10 ms: the summed
  RSS of the client, the daemon and the run's kernel (the session's own
  processes); and the summed RSS and PSS of all of recursa's processes, which
  adds the fork server (the zygote its kernels are forked from: their shared
  pages count again in each one's RSS, once in PSS), the warm spare kernel
  and the sandbox's wrappers. The sessions run before it are stopped first
  (``recursa stop``), so their idle kernels, which a user's other sessions
  would hold, are not counted. Sampling
  reads every process's memory map, which on two cores slows the run it
  watches (by about a third here), so the timed run is not the sampled one;
- CLI latency: ``recursa --help``, ``recursa agents``, ``recursa usage`` and
  ``recursa logs`` (of the many-step session) against the running daemon,
  median of ``--cli-runs``.

With ``--other NAME=COMMAND`` (repeatable; e.g. a prime-agent build) the same
figures are taken for that harness, its runs interleaved with recursa's, and
each figure is printed with the ratio other / recursa. COMMAND is a shell
command line with ``{task}`` where the task goes; it runs with
``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``OPENAI_MODEL`` pointing at the
fake server, and must answer the task by calling a tool named ``python``
(``--tool NAME`` changes it) with an argument ``code``. Its CLI latency and
daemon figures are left out (it has neither). Without ``--other`` it prints
recursa's figures alone.

recursa's bytecode is brought up to date first, as an install leaves it: where
``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it) and sources are newer
than their ``.pyc`` (a checkout touched them), every CLI call would otherwise
compile them again, tens of milliseconds a call that no user pays.

The machine's load average is printed beside the figures: on a busy machine
every figure is worse, the p99 most.

Usage: python benchmarks/compare.py [--steps 100] [--repeats 3] [--other NAME=CMD]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from peak_memory import Peak, kernel_pid, role_of, tree_of

MODEL = "openai/bench"


@dataclass
class Figures:
    """One harness's figures; seconds and bytes."""

    steps: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    ten_cells: list[float] = field(default_factory=list)
    cold_two: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    """Peak RSS of all the harness's processes, per round."""
    session_rss: list[int] = field(default_factory=list)
    """Peak RSS of the client, the daemon and the run's kernel, per round."""
    parts: dict[str, int] = field(default_factory=dict)
    """RSS by role at the largest peak of all."""
    pss: list[int] = field(default_factory=list)
    cli: dict[str, list[float]] = field(default_factory=dict)
    daemon_cpu: list[float] = field(default_factory=list)
    """The daemon's CPU seconds per step of the many-step run (a figure that
    load inflates less than wall time does)."""


@dataclass
class Server:
    """A fake model server in its own process, with a script and a request log."""

    base_url: str
    log: Path
    process: subprocess.Popen[str]

    @classmethod
    def start(cls, where: Path, script: list[dict[str, object]]) -> Server:
        where.mkdir(parents=True, exist_ok=True)
        script_file, log = where / "script.json", where / "requests.jsonl"
        script_file.write_text(json.dumps(script))
        argv = [sys.executable, "-m", "recursa.testing.fake_server", "--script", str(script_file)]
        process = subprocess.Popen(
            [*argv, "--log", str(log)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        base_url = process.stdout.readline().split(": ", 1)[1].strip()
        return cls(base_url, log, process)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def gaps(self) -> list[float]:
        """Reply k's last byte → request k+1 received, for every step."""
        requests = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [
            requests[k + 1]["received_at"] - requests[k]["finished_at"]
            for k in range(len(requests) - 1)
        ]


def fresh_bytecode() -> int:
    """Compile recursa's modules whose ``.pyc`` is missing or stale (as pip's
    install, or a first import without ``PYTHONDONTWRITEBYTECODE``, does);
    returns how many it compiled."""
    import compileall
    import importlib.util

    import recursa

    root = Path(recursa.__file__).parent

    def stale(source: Path) -> bool:
        # What the import system checks: the source's mtime and size kept in the
        # .pyc header (bytes 8-16), not the .pyc file's own mtime.
        try:
            header = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
        except OSError:
            return True
        status = source.stat()
        kept = (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little"))
        return kept != (int(status.st_mtime) & 0xFFFFFFFF, status.st_size & 0xFFFFFFFF)

    count = sum(stale(p) for p in root.rglob("*.py"))
    compileall.compile_dir(root, quiet=1)
    return count


def cells(n: int, tool: str, first: int = 0) -> list[dict[str, object]]:
    """A script of ``n`` distinct trivial cells, then an answer."""
    steps: list[dict[str, object]] = [
        {"tool_calls": [{"name": tool, "arguments": {"code": f"i = {first + k}"}}]}
        for k in range(n)
    ]
    return [*steps, {"text": "done"}]


class Recursa:
    """recursa through its CLI and daemon, in a fresh home."""

    name = "recursa"

    def __init__(self, base: Path) -> None:
        self.home = base / "recursa-home"
        self.work = base / "recursa-work"
        self.work.mkdir(parents=True)
        self.runs = 0
        self.sessions: list[str] = []
        """The sessions of the running daemon, by name, oldest first."""
        command = Path(sys.executable).with_name("recursa")
        self.command = [str(command)] if command.exists() else [sys.executable, "-m", "recursa"]

    def env(self, server: Server) -> dict[str, str]:
        return {
            **os.environ,
            "RECURSA_HOME": str(self.home),
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "bench",
            "RECURSA_MODEL": MODEL,
        }

    def run(self, task: str, server: Server, peak: bool = False) -> tuple[float, Peak | None]:
        """``recursa run TASK`` (the session named after the task and the
        round): its wall time (and the peak memory of the client, the daemon
        and its kernels while it ran)."""
        self.runs += 1
        name = f"{task.replace(' ', '-')}-{self.runs}"
        self.sessions.append(name)
        argv = [*self.command, "run", "--model", MODEL, "--max-steps", "0"]
        argv += ["--name", name, task]
        started = time.monotonic()
        client = subprocess.Popen(
            argv,
            cwd=self.work,
            env=self.env(server),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        sampler = Peak(lambda: [("client", p) for p in tree_of(client.pid)] + self._daemon_tree())
        if peak:
            sampler.__enter__()
        try:
            out, transcript = client.communicate(timeout=600)
        finally:
            if peak:
                sampler.__exit__()
        wall = time.monotonic() - started
        if client.returncode != 0 or "done" not in out:
            raise SystemExit(
                f"recursa run failed ({client.returncode}): {(transcript + out)[-500:]}"
            )
        if peak:
            pid = kernel_pid(transcript)
            if pid is None:
                raise SystemExit(f"recursa run printed no kernel pid: {transcript[-500:]}")
            sampler.kernel = {pid, *(p.pid for p in tree_of(pid))}
        return wall, sampler if peak else None

    def daemon(self) -> psutil.Process | None:
        """The running daemon's process."""
        try:
            state = json.loads((self.home / "daemon.json").read_text())
            return psutil.Process(int(state["pid"]))
        except (OSError, ValueError, KeyError, TypeError, psutil.NoSuchProcess):
            return None

    def _daemon_tree(self) -> list[tuple[str, psutil.Process]]:
        try:
            state = json.loads((self.home / "daemon.json").read_text())
            daemon = tree_of(int(state["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            return []
        processes = [("daemon" if p.pid == state["pid"] else role_of(p), p) for p in daemon]
        # Kernels are launched apart from the daemon (they outlive a crash):
        # they are the processes whose command line names this home.
        home = str(self.home)
        for process in psutil.process_iter(["cmdline"]):
            cmdline = process.info["cmdline"] or []
            if any(home in part for part in cmdline) and process not in daemon:
                processes.append((role_of(process), process))
        return processes

    def cli(self, args: list[str], server: Server) -> float:
        started = time.monotonic()
        done = subprocess.run(
            [*self.command, *args], cwd=self.work, env=self.env(server), capture_output=True
        )
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"recursa {' '.join(args)} failed: {done.stderr.decode()[-300:]}")
        return wall

    def unload_sessions(self, server: Server) -> None:
        """``recursa stop`` every session run so far: their idle kernels are
        another session's memory, not the next run's."""
        for name in self.sessions:
            self.cli(["stop", name], server)

    def stop_daemon(self, server: Server) -> None:
        self.sessions.clear()
        subprocess.run(
            [*self.command, "daemon", "stop"],
            env=self.env(server),
            capture_output=True,
            check=False,
        )


class Other:
    """Another harness, by a command line with ``{task}``."""

    def __init__(self, name: str, template: str, base: Path) -> None:
        self.name = name
        self.template = template
        self.work = base / f"{name}-work"
        self.work.mkdir(parents=True)

    def run(self, task: str, server: Server, peak: bool = False) -> tuple[float, Peak | None]:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "bench",
            "OPENAI_MODEL": MODEL.split("/", 1)[1],
        }
        command = self.template.replace("{task}", shlex.quote(task))
        started = time.monotonic()
        process = subprocess.Popen(
            command, shell=True, cwd=self.work, env=env, stdout=subprocess.PIPE, text=True
        )
        sampler = Peak(lambda: [("all", p) for p in tree_of(process.pid)])
        if peak:
            sampler.__enter__()
        try:
            process.communicate(timeout=600)
        finally:
            if peak:
                sampler.__exit__()
        if process.returncode != 0:
            raise SystemExit(f"{self.name} failed ({process.returncode})")
        return time.monotonic() - started, sampler if peak else None


def measure(
    arm: Recursa | Other, figures: Figures, base: Path, args: argparse.Namespace, round_: int
) -> None:
    """One round of every figure for ``arm``, against one server (a daemon keeps
    the model's address it started with): a cold two-step run (no daemon yet;
    each round stops it at the end), a timed 10-cell run, a sampled one for
    the peak memory, then the many-step run."""
    tool = "python" if isinstance(arm, Recursa) else args.tool
    first = 1000 * round_
    script = [*cells(1, tool, first), *cells(10, tool, first + 100)]
    script += [*cells(10, tool, first + 200), *cells(args.steps + 1, tool, first + 300)]
    server = Server.start(base / f"{arm.name}-{round_}", script)
    try:
        wall, _ = arm.run("two steps", server)
        figures.cold_two.append(wall)
        wall, _ = arm.run("ten cells", server)
        figures.ten_cells.append(wall)
        if isinstance(arm, Recursa):
            arm.unload_sessions(server)
        _, peak = arm.run("ten cells", server, peak=True)
        assert peak is not None
        if peak.rss > max(figures.rss, default=0):
            figures.parts = peak.parts
        figures.rss.append(peak.rss)
        figures.pss.append(peak.pss)
        # Another harness is one process tree: all of it is its session's.
        figures.session_rss.append(peak.session_rss if isinstance(arm, Recursa) else peak.rss)
        daemon = arm.daemon() if isinstance(arm, Recursa) else None
        before = _cpu(daemon)
        arm.run("many steps", server)
        if daemon is not None:
            figures.daemon_cpu.append((_cpu(daemon) - before) / (args.steps + 1))
        if isinstance(arm, Recursa):
            steps_session = f"many-steps-{arm.runs}"
            for label, argv in (
                ("recursa --help", ["--help"]),
                ("recursa agents", ["agents"]),
                ("recursa usage", ["usage", steps_session]),
                ("recursa logs", ["logs", steps_session]),
            ):
                figures.cli.setdefault(label, []).extend(
                    arm.cli(argv, server) for _ in range(args.cli_runs)
                )
            arm.stop_daemon(server)
    finally:
        server.stop()
    gaps = server.gaps()[2 + 11 + 11 :]  # the many-step run's own (the log is written at exit)
    figures.first.append(gaps[0])
    figures.steps.extend(gaps[1:])


def _cpu(process: psutil.Process | None) -> float:
    if process is None:
        return 0.0
    try:
        times = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(times.user + times.system)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rows(f: Figures) -> dict[str, tuple[float, str]]:
    """Each figure as (value, unit)."""
    out: dict[str, tuple[float, str]] = {}
    if f.steps:
        out["step median"] = (statistics.median(f.steps) * 1000, "ms")
        out["step p90"] = (percentile(f.steps, 0.9) * 1000, "ms")
        out["step p99"] = (percentile(f.steps, 0.99) * 1000, "ms")
        out["step max"] = (max(f.steps) * 1000, "ms")
    if f.daemon_cpu:
        out["daemon CPU/step"] = (statistics.median(f.daemon_cpu) * 1000, "ms")
    if f.first:
        out["first step"] = (statistics.median(f.first) * 1000, "ms")
    if f.ten_cells:
        out["10-cell run"] = (statistics.median(f.ten_cells), "s")
    if f.cold_two:
        out["cold two-step run"] = (statistics.median(f.cold_two), "s")
    if f.rss:
        out["peak RSS, session"] = (max(f.session_rss) / 2**20, "MiB")
        out["peak RSS, all"] = (max(f.rss) / 2**20, "MiB")
        out["peak PSS, all"] = (max(f.pss) / 2**20, "MiB")
        for role, rss in sorted(f.parts.items()):
            out[f"  {role}"] = (rss / 2**20, "MiB")
    for label, values in f.cli.items():
        out[label] = (statistics.median(values), "s")
    return out


def report(figures: dict[str, Figures], args: argparse.Namespace) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    ncpu = os.cpu_count()
    print(f"machine: {ncpu} cores; load average (1, 5, 15 min) at the end: {load}")
    print(
        f"{args.repeats} rounds, interleaved; {args.steps} steps per round "
        f"({len(figures['recursa'].steps)} step gaps in all)\n"
    )
    table = {name: rows(f) for name, f in figures.items()}
    names = list(figures)
    head = f"{'figure':<20}" + "".join(f"{n:>16}" for n in names)
    if len(names) > 1:
        head += "".join(f"{n + ' / recursa':>22}" for n in names[1:])
    print(head)
    for label, (value, unit) in table["recursa"].items():
        line = f"{label:<20}{value:>12.2f} {unit:<3}"
        for name in names[1:]:
            other = table[name].get(label)
            line += f"{other[0]:>12.2f} {unit:<3}" if other else f"{'-':>16}"
        for name in names[1:]:
            other = table[name].get(label)
            line += f"{other[0] / value:>21.1f}x" if other and value else f"{'-':>22}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=100, help="cells in the per-step run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every figure")
    parser.add_argument("--cli-runs", type=int, default=5, help="calls per CLI figure per round")
    parser.add_argument(
        "--other", action="append", default=[], metavar="NAME=COMMAND", help="another harness"
    )
    parser.add_argument("--tool", default="python", help="the other harness's code tool")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    print(f"bytecode: {fresh_bytecode()} of recursa's modules compiled (stale or missing)")
    base = Path(tempfile.mkdtemp(prefix="recursa-compare-"))
    recursa = Recursa(base)
    arms: list[Recursa | Other] = [recursa]
    for spec in args.other:
        name, _, template = spec.partition("=")
        if not template or "{task}" not in template:
            raise SystemExit(f"--other {spec!r}: give NAME=COMMAND with {{task}} in COMMAND")
        arms.append(Other(name, template, base))
    figures = {arm.name: Figures() for arm in arms}
    try:
        for round_ in range(args.repeats):
            for arm in arms:
                measure(arm, figures[arm.name], base, args, round_)
        report(figures, args)
        if args.json:
            print(json.dumps({name: rows(f) for name, f in figures.items()}))
    finally:
        server = Server.start(base / "last", [])
        recursa.stop_daemon(server)
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
