"""A verify trial in a copy-on-write view of its working directory: the trial's process enters a new user and mount
namespace (unprivileged, Linux >= 5.11) and mounts an overlay over its working directory, whose writes land in a
scratch folder that verify deletes afterwards; its own run directory is bind-mounted back so what it records
reaches verify. The script then sees a real file system (hard links, renames, deletions, listings all behave),
and nothing it does under that folder reaches the user's files. Paths outside it stay under the write guard.

Run as `python -m neuraldbg_cli.verify.overlay ROOT UPPER KEEP -- COMMAND...` (a light launcher: no torch): when
anything of the set-up fails it says why in NEURALDBG_OVERLAY_FAILED and runs COMMAND under the write guard
alone. `available()` tries the same set-up once on a scratch folder: verify falls back to the guard when the
kernel, a security policy (e.g. AppArmor's restriction of unprivileged user namespaces) or the file system
refuses it, or when NEURALDBG_ISOLATION=guard asks for the guard."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from neuraldbg_cli.reason.fixspec import ENV_OVERLAY, ENV_OVERLAY_FAILED

ENV_CHOICE = "NEURALDBG_ISOLATION"  # "guard": never try the overlay
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MIN_KERNEL = (5, 11)  # overlayfs mountable in an unprivileged user namespace


def enter(root: str, upper: str, keep: str) -> None:
    """Mount the overlay over `root` in new namespaces, its writes into `upper`, `keep` (inside root) bind-mounted
    back to itself; OSError with the reason when the kernel refuses any step."""
    bad = [p for p in (root, upper) if any(c in p for c in ",:\\\n")]
    if bad:
        raise OSError(errno.EINVAL, f"{bad[0]} has a character overlay options cannot carry")
    nested = _mounts_below(root)
    if nested:
        raise OSError(errno.EXDEV, f"{nested[0]} is a mount inside {root} (an overlay would hide it)")
    libc = ctypes.CDLL(None, use_errno=True)

    def check(rc: int, what: str) -> None:
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    uid, gid = os.getuid(), os.getgid()
    check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare a user and mount namespace")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make the mounts private")
    keep_fd = os.open(keep, os.O_PATH | os.O_DIRECTORY)  # the real folder (this namespace's mount of it)
    work = os.path.join(upper, "work")
    os.makedirs(os.path.join(upper, "upper"), exist_ok=True)
    os.makedirs(work, exist_ok=True)
    opts = f"lowerdir={root},upperdir={os.path.join(upper, 'upper')},workdir={work},userxattr"
    check(libc.mount(b"overlay", root.encode(), b"overlay", 0, opts.encode()), "mount the overlay")
    check(libc.mount(f"/proc/self/fd/{keep_fd}".encode(), keep.encode(), None, MS_BIND | MS_REC, None), "bind")
    os.close(keep_fd)
    os.chdir(os.getcwd())  # the working directory is looked up again: through the overlay now


def _mounts_below(root: str) -> list[str]:
    """Mount points strictly inside `root` (an overlay shows only the file system root itself is on)."""
    try:
        with open("/proc/self/mountinfo") as f:
            points = [ln.split()[4].replace("\\040", " ") for ln in f if len(ln.split()) > 4]
    except OSError:
        return []
    return [p for p in points if p != root and p.startswith(root.rstrip("/") + "/")]


def launch(argv: list[str]) -> None:
    """The launcher: ROOT UPPER KEEP -- COMMAND...; never returns (execs COMMAND)."""
    root, upper, keep, sep, *command = argv
    assert sep == "--" and command, argv
    try:
        enter(root, upper, keep)
        os.environ[ENV_OVERLAY] = root
    except OSError as e:
        os.environ[ENV_OVERLAY_FAILED] = str(e.strerror or e)
    os.execvp(command[0], command)


def scratch(root: str) -> str | None:
    """A scratch folder for a trial's writes, outside `root` (None: none can be had there)."""
    try:
        folder = tempfile.mkdtemp(prefix="neuraldbg-overlay-")
    except OSError:
        return None
    if os.path.commonpath([folder, root]) == root:
        remove(folder)
        return None
    return folder


def remove(folder: str) -> None:
    """Delete a scratch folder: the kernel leaves overlay's work folder unreadable to its owner, so every folder is
    opened up first (top-down: each before os.walk enters it)."""
    for top, dirs, _ in os.walk(folder):
        for d in dirs:
            path = os.path.join(top, d)
            if not os.path.islink(path):
                try:
                    os.chmod(path, stat.S_IRWXU)
                except OSError:
                    pass
    shutil.rmtree(folder, ignore_errors=True)


@functools.cache
def available() -> str:
    """'' when trials can run in an overlay on this machine, else why not (one phrase)."""
    if os.environ.get(ENV_CHOICE, "").strip().lower() == "guard":
        return f"{ENV_CHOICE}=guard"
    if sys.platform != "linux":
        return f"not Linux ({sys.platform})"
    release = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2] if x.isdigit())
    if release < MIN_KERNEL:
        return f"Linux {platform.release()} (an unprivileged overlay needs 5.11)"
    base = tempfile.mkdtemp(prefix="neuraldbg-probe-")
    try:
        return _probe(Path(base))
    finally:
        remove(base)


PROBE = """
import os, shutil, sys
assert os.environ.get(sys.argv[2]) == sys.argv[1], os.environ.get(sys.argv[3], "not entered")
with open("new.txt", "w") as f:
    f.write("new")
os.unlink("lower.txt")
os.link("new.txt", "linked.txt")
os.replace("linked.txt", "moved.txt")
shutil.rmtree("gone")
os.mkdir("merged/new")
os.rename("merged/new", "merged/renamed")
assert sorted(os.listdir(".")) == ["kept", "merged", "moved.txt", "new.txt"], os.listdir(".")
with open("kept/seen.txt", "w") as f:
    f.write("kept")
"""


def _probe(base: Path) -> str:
    """Run the launcher on a scratch folder: the script writes, links, renames, deletes a lower file and a lower
    folder, renames a new folder inside a lower one; the lower folder must be unchanged and the kept folder must
    hold what it wrote there."""
    root, upper = base / "root", base / "upper"
    for folder in ("kept", "gone", "merged"):
        (root / folder).mkdir(parents=True)
    (root / "lower.txt").write_text("lower")
    (root / "gone" / "file.txt").write_text("lower")
    upper.mkdir()
    argv = [sys.executable, "-m", "neuraldbg_cli.verify.overlay", str(root), str(upper), str(root / "kept"), "--"]
    argv += [sys.executable, "-c", PROBE, str(root), ENV_OVERLAY, ENV_OVERLAY_FAILED]
    env = {k: v for k, v in os.environ.items() if k not in (ENV_OVERLAY, ENV_OVERLAY_FAILED)}
    try:
        r = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"the overlay probe did not run: {e}"
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return f"the overlay probe failed: {lines[-1] if lines else f'exit status {r.returncode}'}"
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    if names != ["gone", "gone/file.txt", "kept", "kept/seen.txt", "lower.txt", "merged"]:
        return f"the overlay probe's folder holds {names}: the lower folder changed or the kept one was not written"
    return ""


if __name__ == "__main__":
    launch(sys.argv[1:])
