"""What the sandboxed interpreter needs from the host, and nothing more (bound by
:mod:`earthrl.envs.sandbox.bwrap`).

The child runs ``python -I`` (no ``PYTHONPATH``, no user site, no script folder on ``sys.path``),
so what it can import is exactly the ``sys.path`` that the same interpreter computes on its own
at start-up: the standard library, ``lib-dynload`` and the site-packages of the virtual
environment (with what their ``.pth`` files add). :func:`interpreter_layout` asks the
interpreter once per process (``python -I -c ...`` on the host) and returns those folders, the
few files it opens by name (the interpreter binary, ``pyvenv.cfg``, ``libpython`` when it is a
shared build) and the symbolic links that lead to the binary. Folders the parent added to its
own ``sys.path`` (the current folder, test roots, ``PYTHONPATH``) are not among them; neither
is EarthRL's package folder (the child imports nothing of EarthRL: its tools are stubs built
from the specs the parent sends).

Paths reached through symbolic links (a symlinked virtual environment, repository or data
folder) are bound at their real path; :func:`symlink_hops` lists the links on the way so that
the sandbox can recreate the ones outside what is bound, and the interpreter is executed by a
path that exists inside (:attr:`InterpreterLayout.exe`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

_PATH = "/usr/bin:/bin"
_ASK = ("import json, sys\n"
        "maps = [l.split()[5] for l in open('/proc/self/maps') if len(l.split()) > 5]\n"
        "print(json.dumps({'path': sys.path, 'prefix': sys.prefix, 'maps': maps}))")


@dataclass(frozen=True)
class InterpreterLayout:
    """The host paths one sandboxed interpreter needs.

    Attributes:
        exe: path to execute: ``sys.executable`` with its folder resolved (the venv's ``bin``
            at its real path, so the venv is still found from it).
        folders: real folders of the interpreter's own ``sys.path`` (nested ones dropped).
        files: real files opened by name: the binary, ``pyvenv.cfg``, a zipped standard library,
            shared libraries the bare interpreter maps from outside ``folders``.
        links: ``(link, target)`` of every symbolic link met on the way to the binary (the
            sandbox recreates those that lie outside what it binds).
    """

    exe: str
    folders: tuple[str, ...]
    files: tuple[str, ...]
    links: tuple[tuple[str, str], ...]


def under(path: str, roots) -> bool:
    """``path`` is one of ``roots`` or lies inside one (plain string test on real paths)."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def outermost(paths) -> list[str]:
    """``paths`` without duplicates and without the ones inside another of them, sorted."""
    keep: list[str] = []
    for p in sorted(set(paths), key=len):
        if not under(p, keep):
            keep.append(p)
    return sorted(keep)


def symlink_hops(path: str) -> list[tuple[str, str]]:
    """``(link, target)`` (target as stored) of every symbolic link the kernel follows when it
    resolves ``path``, component by component, in order.

    Raises:
        OSError: a loop of links (more than 40).
    """
    hops: list[tuple[str, str]] = []

    def walk(p: str, depth: int) -> str:
        if depth > 40:
            raise OSError(f"too many levels of symbolic links in {path}")
        cur = "/"
        for part in p.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                cur = os.path.dirname(cur)
                continue
            nxt = os.path.join(cur, part)
            if os.path.islink(nxt):
                target = os.readlink(nxt)
                hops.append((nxt, target))
                cur = walk(os.path.join(cur, target), depth + 1)
            else:
                cur = nxt
        return cur

    walk(os.path.abspath(path), 0)
    return hops


def venv_exe(executable: str) -> str:
    """``executable`` with its folder resolved and its file name kept: a venv's ``bin/python``
    is a link to the base interpreter, and Python finds the venv (``pyvenv.cfg``) from the
    unresolved name."""
    return os.path.join(os.path.realpath(os.path.dirname(executable)),
                        os.path.basename(executable))


@lru_cache(maxsize=4)
def interpreter_layout(executable: str | None = None) -> InterpreterLayout:
    """The :class:`InterpreterLayout` of ``executable`` (default ``sys.executable``), asked of
    the interpreter itself once per process.

    Raises:
        RuntimeError: the interpreter did not answer (one line with its error).
    """
    exe = venv_exe(executable or sys.executable)
    p = None
    try:
        p = subprocess.run([exe, "-I", "-c", _ASK], capture_output=True, text=True, timeout=60,
                           env={"PATH": _PATH}, cwd="/")
        info = json.loads(p.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        said = p.stderr.strip().splitlines() if p is not None else []
        raise RuntimeError(f"the interpreter {exe} did not start: "
                           f"{(said[-1] if said else str(e))[:200]}") from None
    folders = outermost(os.path.realpath(d) for d in info["path"] if d and os.path.isdir(d))
    files = {os.path.realpath(exe)}
    files |= {os.path.realpath(z) for z in info["path"] if z and os.path.isfile(z)}  # a zip
    cfg = os.path.join(os.path.realpath(info["prefix"]), "pyvenv.cfg")
    if os.path.isfile(cfg):
        files.add(cfg)
    files |= {os.path.realpath(m) for m in info["maps"]
              if m.startswith("/") and ".so" in os.path.basename(m) and os.path.isfile(m)}
    files = {f for f in files if not under(f, folders)}
    return InterpreterLayout(exe, tuple(folders), tuple(sorted(files)),
                             tuple(symlink_hops(exe)))
