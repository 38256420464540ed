"""The verify trial's write guard, one test per way the standard library writes a file, on the Python running the
suite (CI runs it on 3.10, 3.11 and 3.13: pathlib's internals differ between them). One child process installs
the guard (its audit hook cannot be removed) and tries every way on its own files in a user's folder; each test
checks that its files are byte-, time- and mode-identical afterwards, that nothing was added next to them, and
that the script read back what it wrote where the write was redirected (or was refused: a function bound before
the guard existed is stopped by the audit hook, the trial then crashes instead of changing the file)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# way -> what the script does with the user's file `<way>.txt` (in the folder `proj`); `read(p)` reads back
WAYS = {
    "open_w": "with open(f, 'w') as h: h.write('new')\nout = read(f)",
    "open_a": "with open(f, 'a') as h: h.write('+more')\nout = read(f)",
    "io_open": "with io.open(f, 'w') as h: h.write('new')\nout = read(f)",
    "io_fileio": "io.FileIO(f, 'w').close()",
    "os_open": "fd = os.open(f, os.O_WRONLY | os.O_TRUNC)\nos.write(fd, b'new')\nos.close(fd)\nout = read(f)",
    "os_remove": "os.remove(f)",
    "os_unlink": "os.unlink(f)",
    "os_rename": "os.rename(f, f + '.moved')\nout = read(f + '.moved')",
    "os_replace_over": "open(f + '.new', 'w').write('new')\nos.replace(f + '.new', f)\nout = read(f)",
    "os_truncate": "os.truncate(f, 2)\nout = read(f)",
    "os_utime": "os.utime(f, (1, 1))",
    "os_chmod": "os.chmod(f, 0o600)",
    "os_link": "os.link(f, f + '.hard')\nout = read(f + '.hard')",
    "os_symlink": "os.symlink(f, f + '.sym')",
    "pathlib_write_text": "Path(f).write_text('new')\nout = Path(f).read_text()",
    "pathlib_write_bytes": "Path(f).write_bytes(b'new')\nout = read(f)",
    "pathlib_open_append": "with Path(f).open('a') as h: h.write('+more')\nout = read(f)",
    "pathlib_touch": "Path(f).touch()",
    "pathlib_unlink": "Path(f).unlink()",
    "pathlib_rename": "Path(f).rename(f + '.moved')",
    "pathlib_replace_over": "Path(f + '.new').write_text('new')\nPath(f + '.new').replace(f)\nout = read(f)",
    "pathlib_chmod": "Path(f).chmod(0o600)",
    "shutil_copyfile_over": "open(f + '.src', 'w').write('new')\nshutil.copyfile(f + '.src', f)\nout = read(f)",
    "shutil_copy2_over": "open(f + '.src', 'w').write('new')\nshutil.copy2(f + '.src', f)\nout = read(f)",
    "shutil_move": "shutil.move(f, f + '.moved')",
    "shutil_rmtree": "shutil.rmtree(f + '.d')",
    "tempfile_replace": (
        "t = tempfile.NamedTemporaryFile('w', dir=proj, delete=False)\nt.write('new')\nt.close()\n"
        "os.replace(t.name, f)\nout = read(f)"
    ),
    "tempfile_mkstemp_replace": (
        "fd, name = tempfile.mkstemp()\nos.write(fd, b'new')\nos.close(fd)\nos.replace(name, f)\nout = read(f)"
    ),
    "bound_before_guard": "early_replace(early_new(f), f)",
    # the script's view stays that of a real file system (a checkpoint saver's unlink, replace, link, copy, rotate)
    "unlink_twice": "os.unlink(f)\ntry:\n    os.unlink(f)\nexcept FileNotFoundError:\n    out = str(os.path.exists(f))",
    "replace_then_link": (
        "open(f + '.t', 'w').write('new')\nos.unlink(f)\nos.replace(f + '.t', f)\nos.link(f, f + '.k')\n"
        "out = str(os.path.samefile(f, f + '.k')) + read(f + '.k')\n"
        "try:\n    shutil.copy2(f, f + '.k')\nexcept shutil.SameFileError:\n    out += ' same'"
    ),
    "link_onto_existing": "open(f + '.s', 'w').write('x')\ntry:\n    os.link(f + '.s', f)\nexcept FileExistsError:\n    out = read(f)",
    "copy2_then_unlink": "shutil.copy2(f, f + '.c')\nos.unlink(f)\nout = read(f + '.c') + str(os.path.exists(f))",
    "mkdir_listdir": "os.makedirs(f + '.d/sub')\nopen(f + '.d/sub/x', 'w').write('1')\nout = str(mine(os.listdir(proj)))",
    "unlink_scandir": (
        "open(f + '.new', 'w').write('1')\nos.unlink(f)\nwith os.scandir(proj) as it:\n"
        "    out = str(mine(e.name for e in it))"
    ),
    "rename_dir_glob": (
        "os.makedirs(f + '.tmp')\nopen(f + '.tmp/a', 'w').write('1')\nos.rename(f + '.tmp', f + '.final')\n"
        "out = str(mine(os.path.basename(p) for p in glob.glob(f + '*'))) + read(f + '.final/a')"
    ),
    "rmtree_recreate": "shutil.rmtree(f + '.d')\nos.makedirs(f + '.d')\nout = str(os.listdir(f + '.d'))",
    # pathlib reads through functions bound at import on 3.10 (its accessor) and 3.13 (Path.glob's globber)
    "path_glob": "open(f + '.new', 'w').write('1')\nos.unlink(f)\nout = str(mine(p.name for p in Path(proj).glob('*')))",
    "path_exists": "os.unlink(f)\nout = str(Path(f).exists())",
    "path_iterdir": "os.makedirs(f + '.d')\nout = str(mine(p.name for p in Path(proj).iterdir()))",
}
# what the script reads back after a redirected write (None: nothing to read, or refused)
READ_BACK = {"open_w": "new", "open_a": "mine+more", "io_open": "new", "os_open": "new", "os_rename": "mine",
             "os_replace_over": "new", "os_truncate": "mi", "os_link": "mine", "pathlib_write_text": "new",
             "pathlib_write_bytes": "new", "pathlib_open_append": "mine+more", "pathlib_replace_over": "new",
             "shutil_copyfile_over": "new", "shutil_copy2_over": "new", "tempfile_replace": "new",
             "tempfile_mkstemp_replace": "new", "unlink_twice": "False", "replace_then_link": "Truenew same",
             "link_onto_existing": "mine", "copy2_then_unlink": "mineFalse",
             "mkdir_listdir": "['mkdir_listdir.txt', 'mkdir_listdir.txt.d']",
             "unlink_scandir": "['unlink_scandir.txt.new']",
             "rename_dir_glob": "['rename_dir_glob.txt', 'rename_dir_glob.txt.final']1", "rmtree_recreate": "[]",
             "path_glob": "['path_glob.txt.new']", "path_exists": "False",
             "path_iterdir": "['path_iterdir.txt', 'path_iterdir.txt.d']"}
REFUSED = {"io_fileio", "bound_before_guard"}  # reached the OS past every redirect: refused, the file unchanged

CHILD = """
import glob, io, json, os, shutil, sys, tempfile
from os import replace as early_replace
from pathlib import Path
from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.verify.writeguard import WriteGuard

home, proj = sys.argv[1], sys.argv[2]
ways = json.loads(sys.argv[3])
def early_new(f):
    name = os.path.join(home, 'early.tmp')
    with open(name, 'w') as h:
        h.write('new')
    return name
def mine(names):
    return sorted(n for n in names if n.startswith(way + '.'))
def read(p):
    with open(p) as h:
        return h.read()
guard = WriteGuard(Path(home))
guard.install(HookSet())
results = {}
for way, code in ways.items():
    f = os.path.join(proj, way + '.txt')
    scope = dict(globals(), f=f, out=None, way=way)
    try:
        exec(code, scope)
        results[way] = {"state": "ok", "out": scope["out"]}
    except PermissionError as e:
        results[way] = {"state": "refused", "error": str(e)}
    except Exception as e:
        results[way] = {"state": "error", "error": repr(e)}
print(json.dumps(results))
"""


def _state(folder: Path) -> dict[str, tuple]:
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None,
                                         p.lstat().st_mtime_ns, p.lstat().st_mode)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def tried(tmp_path_factory):
    base = tmp_path_factory.mktemp("guard")
    home, proj = base / "trial", base / "proj"
    home.mkdir()
    proj.mkdir()
    for way in WAYS:
        (proj / f"{way}.txt").write_text("mine")
        os.utime(proj / f"{way}.txt", (1_000_000, 1_000_000))
    for way in ("shutil_rmtree", "rmtree_recreate"):
        (proj / f"{way}.txt.d").mkdir()
        (proj / f"{way}.txt.d" / "inside").write_text("mine")
    before = _state(proj)
    scratch = base / "scratch"  # the child's temporary directory: new files there are allowed, not in proj
    scratch.mkdir()
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(home), str(proj), json.dumps(WAYS)],
                       capture_output=True, text=True, timeout=120, cwd=proj, env={**os.environ, "TMPDIR": str(scratch)})
    assert r.returncode == 0, r.stderr
    return before, _state(proj), json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("way", list(WAYS))
def test_a_trial_never_changes_a_users_file(tried, way):
    before, after, results = tried
    mine = {k: v for k, v in before.items() if k.startswith(f"{way}.txt")}
    now = {k: v for k, v in after.items() if k.startswith(f"{way}.txt")}
    assert now == mine, (way, results[way])  # unchanged: content, times, mode; nothing added beside it
    expected = "refused" if way in REFUSED else "ok"
    assert results[way]["state"] == expected, results[way]
    if way in READ_BACK:
        assert results[way]["out"] == READ_BACK[way], results[way]  # the script sees its own write
