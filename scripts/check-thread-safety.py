#!/usr/bin/env python3
"""Thread-safety check: clang's -Wthread-safety over the files that use the annotations.

Usage: scripts/check-thread-safety.py [--build DIR] [-j N] [--list]

The release build is GCC, where the annotations of base/thread_annotations.h expand to nothing.
This script compiles, with clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety and the
flags of the build's compile_commands.json, every translation unit that uses them: a TU that
directly includes base/thread_annotations.h or base/mutex.h, or that directly includes an
annotated header (one that includes those) of its own folder, i.e. the .cc files and tests of an
annotated class, where its guarded members are touched and its inline functions are analysed.
(Other modules that merely call such a class through its EXCLUDES API are not recompiled: a
public REQUIRES function is the case that would need them, and our classes keep those private.)
Only the thread-safety warnings count: the GCC build owns every other warning, so the other
-W flags are dropped here.

Then the negative tests: every tests/thread_safety/*_bad.cc must FAIL with a -Wthread-safety
diagnostic (a check that cannot fail proves nothing), every *_good.cc must compile. They need
no build directory. Exit status 0 only when all of it holds. Python 3 standard library only.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MARKERS = ("base/thread_annotations.h", "base/mutex.h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CLANG = os.environ.get("CLANGXX", "clang++")
EXTRA = [
    "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option",
    # Boost 1.74's Asio does not detect clang 14's C++20 coroutines with libstdc++.
    "-DBOOST_ASIO_HAS_CO_AWAIT=1", "-DBOOST_ASIO_HAS_STD_COROUTINE=1",
]


def includes_of(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return INCLUDE.findall(f.read())
    except OSError:
        return []


def resolve(inc, from_dir):
    for base in (from_dir, os.path.join(ROOT, "src"), os.path.join(ROOT, "tests")):
        full = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(full):
            return full
    return None


def annotated_headers():
    """Headers under src/ that directly include a marker (plus the markers themselves)."""
    marked = {os.path.join(ROOT, "src", m) for m in MARKERS}
    out = set(marked)
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        for name in files:
            if name.endswith((".h", ".inc")):
                full = os.path.join(dirpath, name)
                if any(resolve(i, dirpath) in marked for i in includes_of(full)):
                    out.add(full)
    return out


def clang_args(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    src = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    out, skip = [CLANG], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-W") or os.path.normpath(
                os.path.join(entry["directory"], a)) == src:
            continue
        out.append(a)
    return out + EXTRA + [src]


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--list", action="store_true", help="print the translation units and exit")
    args = ap.parse_args()
    t0 = time.time()
    db_path = os.path.join(args.build, "compile_commands.json")
    if not os.path.isfile(db_path):
        print(f"check-thread-safety: {db_path} missing (configure first)", file=sys.stderr)
        return 2
    with open(db_path, encoding="utf-8") as f:
        db = json.load(f)
    headers = annotated_headers()
    markers = {os.path.join(ROOT, "src", m) for m in MARKERS}
    units, seen = [], set()
    for e in db:
        src = os.path.normpath(os.path.join(e["directory"], e["file"]))
        if src in seen or not src.startswith(ROOT + os.sep):
            continue
        seen.add(src)
        inc = [resolve(i, os.path.dirname(src)) for i in includes_of(src)]
        if any(h in markers for h in inc) or any(
                h in headers and os.path.dirname(h) == os.path.dirname(src) for h in inc):
            units.append((src, e))
    units.sort(key=lambda u: u[0])
    if args.list:
        for src, _ in units:
            print(os.path.relpath(src, ROOT))
        return 0

    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.j)) as pool:
        futures = {pool.submit(run, clang_args(e), e["directory"]): src for src, e in units}
        for fut in concurrent.futures.as_completed(futures):
            rc, out = fut.result()
            if rc != 0:
                failures.append((futures[fut], out))
    for src, out in sorted(failures):
        print(f"--- {os.path.relpath(src, ROOT)}\n{out}", end="")

    # Negative and positive tests of the check itself.
    neg_dir = os.path.join(ROOT, "tests", "thread_safety")
    base_cmd = [CLANG, "-std=c++20", "-I", os.path.join(ROOT, "src")] + EXTRA
    probes = sorted(n for n in os.listdir(neg_dir) if n.endswith(".cc")) if os.path.isdir(neg_dir) else []
    probe_errors = []
    for name in probes:
        rc, out = run(base_cmd + [os.path.join(neg_dir, name)], ROOT)
        if name.endswith("_bad.cc") and (rc == 0 or "-Wthread-safety" not in out):
            probe_errors.append(f"tests/thread_safety/{name}: expected a -Wthread-safety error, got "
                                f"rc={rc}\n{out}")
        elif name.endswith("_good.cc") and rc != 0:
            probe_errors.append(f"tests/thread_safety/{name}: expected to compile\n{out}")
    if not any(n.endswith("_bad.cc") for n in probes):
        probe_errors.append("tests/thread_safety/: no *_bad.cc negative test")
    for e in probe_errors:
        print(e)

    dt = time.time() - t0
    if failures or probe_errors:
        print(f"check-thread-safety: {len(failures)} of {len(units)} translation unit(s) failed, "
              f"{len(probe_errors)} probe error(s) ({dt:.1f} s)")
        return 1
    print(f"check-thread-safety: ok ({len(units)} translation units, {len(probes)} probes, {dt:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
