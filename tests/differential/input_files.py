"""The inputs of one differential run as files in a fresh temporary folder.

    with InputFiles(inputs, "zipfile_diff.", ".zip") as files:
        ... files.paths ...
        files.keep(failing_paths, keep_dir)   # moved out before the folder is removed

The folder and every file left in it are removed on exit, unless `keep_all` is set. `parent`:
where the folder is made (default: the system's temporary folder).

fixture_inputs(folder, suffixes) reads the fixtures a run starts from; scan_reports(ckptscan,
paths) is the scanner's side of a run: its report of each file, read in-process (--no-sandbox).
"""
import json
import os
import shutil
import subprocess
import tempfile


def fixture_inputs(folder, suffixes, skip=()):
    """The bytes of every file below `folder` whose name ends with one of `suffixes` (and is
    not in `skip`), in a fixed order."""
    data = []
    for dirpath, _, names in sorted(os.walk(folder)):
        for n in sorted(names):
            if n.endswith(tuple(suffixes)) and n not in skip:
                with open(os.path.join(dirpath, n), "rb") as f:
                    data.append(f.read())
    return data


def scan_reports(ckptscan, paths, batch=400):
    """`ckptscan scan --no-sandbox --format json` over `paths`, `batch` files a run: each
    file's report by its path."""
    reports = {}
    for start in range(0, len(paths), batch):
        proc = subprocess.run([ckptscan, "scan", "--no-sandbox", "--format", "json"]
                              + paths[start:start + batch], capture_output=True, text=True,
                              timeout=600)
        for f in json.loads(proc.stdout)["files"]:
            reports[f["path"]] = f
    return reports


class InputFiles:
    def __init__(self, inputs, prefix, suffix, keep_all=False, parent=None):
        self.dir = tempfile.mkdtemp(prefix=prefix, dir=parent)
        self.keep_all = keep_all
        self.paths = []
        for i, data in enumerate(inputs):
            p = os.path.join(self.dir, "%06d%s" % (i, suffix))
            with open(p, "wb") as f:
                f.write(data)
            self.paths.append(p)

    def keep(self, paths, keep_dir):
        """Moves `paths` (failing inputs) to keep_dir, when one is given."""
        if not keep_dir or not paths:
            return
        os.makedirs(keep_dir, exist_ok=True)
        for p in paths:
            os.replace(p, os.path.join(keep_dir, os.path.basename(p)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.keep_all:
            shutil.rmtree(self.dir, ignore_errors=True)
        return False
