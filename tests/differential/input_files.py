"""The inputs of one differential run as files in a fresh temporary folder.

    with InputFiles(inputs, "zipfile_diff.", ".zip") as files:
        ... files.paths ...
        files.keep(failing_paths, keep_dir)   # moved out before the folder is removed

The folder and every file left in it are removed on exit, unless `keep_all` is set. `parent`:
where the folder is made (default: the system's temporary folder).
"""
import os
import shutil
import tempfile


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
