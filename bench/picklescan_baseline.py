#!/usr/bin/python3
"""The baseline scan ckptscan is measured against: what picklescan does for a torch checkpoint.

    /usr/bin/python3 bench/picklescan_baseline.py FILE

Opens the file with zipfile, and for every member whose name ends in .pkl (or, for a non-zip
file, the whole file) walks pickletools.genops, collecting GLOBAL/STACK_GLOBAL names. Prints the
number of globals. Stdlib only; imports nothing from the scanned file.
"""
import io
import pickletools
import sys
import zipfile


def globals_in(data):
    found = []
    strings = []
    for op, arg, _ in pickletools.genops(io.BytesIO(data)):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "GLOBAL":
            found.append(tuple(arg.split(" ", 1)))
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.append((strings[-2], strings[-1]))
        if op.name == "STOP":
            break
    return found


def main():
    path = sys.argv[1]
    total = 0
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.endswith(".pkl"):
                    total += len(globals_in(z.read(name)))
    else:
        with open(path, "rb") as f:
            total += len(globals_in(f.read()))
    print(total)


if __name__ == "__main__":
    main()
