"""The processes of a running ``serve`` that answer requests, and the CPU each has used."""

from __future__ import annotations

import psutil


def workers(pid: int) -> list[psutil.Process]:
    """The Python processes under ``serve`` that answer requests (Sanic's workers and its
    manager; not the sandbox's processes)."""
    out = []
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            line = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "python" in line and "sandbox_child" not in line and "multiprocessing" in line:
            out.append(proc)
    if not out:  # a single-process serve answers itself
        out = [psutil.Process(pid)]
    return out


def cpus(procs: list[psutil.Process]) -> list[float]:
    """Each process's CPU seconds so far (0 for one that has gone)."""
    out = []
    for proc in procs:
        try:
            t = proc.cpu_times()
            out.append(t.user + t.system)
        except psutil.Error:
            out.append(0.0)
    return out


def shares(each: list[float]) -> str:
    """Each worker's share of the CPU the workers used, largest first (``56%/44%``).

    Which worker takes the clients' connections decides much: with one listening socket
    shared, a burst of keep-alive connections went mostly (or all) to the first worker
    awake; with a listener per worker (``switchboard.cli.listeners``) the kernel spreads
    them.
    """
    used = sum(each) or 1.0
    return "/".join(f"{c / used:.0%}" for c in sorted(each, reverse=True) if c > 0.005 * used)
