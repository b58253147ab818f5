#!/usr/bin/env python3
"""Layer check: no #include from a module to one above it.

Usage: scripts/check-layers.py [--root DIR] [--no-cmake] [--print] [--self-test]

Scans every `#include "..."` in src/ (.h .cc .inc) and fails, naming file:line and the edge,
when a file of module A includes a file of module B and B is not A itself or below A in MODULES
(the allowed dependencies, closed transitively). It also checks, when docs/module-graph.dot is
present (scripts/module-graph.sh writes it from CMake), that every link edge between our
library targets is allowed by the same table, so the table, the includes and the CMake graph
cannot drift apart. `--print` prints the table as the layers of docs/architecture.md.

Rules beyond the table:
  - Every source file under src/ must belong to a module (longest folder/file prefix wins); a new
    folder needs a line in MODULES first.
  - Test files (`*_test.cc`, `*_bench.cc`, `*test_util*`, `*_fuzz*`) may also include the test
    helpers of tests/ and the modules in TEST_EXTRA (synth builds test models).
  - An include is resolved against the including file's folder first, then src/, then tests/.
    An include that resolves nowhere is a system or generated header and is ignored.
Python 3 standard library only. Runs in well under a second (CI runs it before the build).
"""

import argparse
import os
import re
import sys

# module: (path prefixes under src/, allowed direct dependencies). Order: bottom to top.
# A prefix matches a folder ("engine/kv/") or, without the slash, files. Modules that do not
# exist yet (http, cachekey, gateway, control) are the intended layering of issue 13.
MODULES = {
    "base": (["base/"], []),
    "tensor": (["tensor/"], ["base"]),
    "kernels": (["kernels/"], ["tensor"]),
    "gguf": (["gguf/"], ["tensor"]),
    "tokenizer/chat": (["tokenizer/chat/"], ["base"]),
    "tokenizer": (["tokenizer/"], ["gguf", "tokenizer/chat"]),
    "model": (["model/"], ["gguf", "kernels"]),
    "lora": (["lora/"], ["model"]),  # LoRA adapters (GGUF), the registry, the low-rank product
    "cachekey": (["cachekey/"], ["base"]),  # block hashing; the gateway computes the same keys
    "protocol": (["protocol/"], ["base"]),  # the wire contract: priorities, tiers, headers, fields
    "yamlcfg": (["yamlcfg/"], ["base"]),  # the strict YAML toolkit of the config files
    "http": (["http/"], ["base"]),  # Beast server/client, SSE, Prometheus text; Boost only
    "trace": (["trace/"], ["http"]),  # W3C trace context, spans, the OTLP/HTTP exporter
    # engine/: sampler and kv at the bottom; kv <- kvtier; kv <- runner; sampler, kv, runner <-
    # sched (sees the tiers only through its port); everything <- serving.
    "engine/sampler": (["engine/sampler/"], ["model", "tokenizer", "kernels", "cachekey"]),
    "engine/kv": (["engine/kv/"], ["model", "tokenizer", "kernels", "cachekey", "protocol"]),
    "engine/kvtier": (["engine/kvtier/"], ["engine/kv"]),
    "engine/runner": (["engine/runner/"], ["engine/kv", "lora"]),
    "engine/sched": (["engine/sched/"], ["engine/sampler", "engine/kv", "engine/runner"]),
    "engine/serving": (["engine/serving/"], ["engine/sched", "engine/kvtier", "yamlcfg"]),
    "synth": (["synth/"], ["gguf", "kernels", "tokenizer", "model", "lora"]),  # a tool module
    "server": (["server/"], ["engine/serving", "http", "tokenizer", "trace"]),
    "bench": (["bench/"], ["http", "tokenizer", "gguf", "protocol"]),
    "gateway": (["gateway/"], ["http", "trace", "cachekey", "tokenizer", "yamlcfg", "protocol"]),  # never engine/ or server/
    "control": (["control/"], ["http", "gateway", "yamlcfg"]),  # never engine/ or server/
    "app": (["app/"], ["server", "bench", "synth", "gateway", "control"]),
}

# Modules that must never be reached from these, whatever the table above says (a guard against
# a well-meant edit of the table).
FORBIDDEN = {
    "gateway": ["engine/", "server"],
    "control": ["engine/", "server"],
    "http": ["engine/", "server", "model", "tokenizer"],
    "trace": ["engine/", "server", "gateway", "model", "tokenizer"],
}

# Test files may include these modules too (and tests/ helpers).
TEST_EXTRA = ["synth"]
TEST_FILE = re.compile(r"(_test\.cc|_bench\.cc|test_util|_fuzz)")
SOURCE_EXT = (".h", ".cc", ".inc", ".hpp", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def closure():
    """module -> set of modules it may include (itself and everything below it)."""
    memo = {}

    def visit(m, stack):
        if m in memo:
            return memo[m]
        if m in stack:
            sys.exit(f"check-layers: the table has a cycle through {m}")
        out = {m}
        for d in MODULES[m][1]:
            if d not in MODULES:
                sys.exit(f"check-layers: {m} depends on unknown module {d}")
            out |= visit(d, stack | {m})
        memo[m] = out
        return out

    result = {m: visit(m, frozenset()) for m in MODULES}
    for m, bad in FORBIDDEN.items():
        for b in bad:
            hit = [d for d in result[m] if d == b or (b.endswith("/") and d.startswith(b))]
            if hit:
                sys.exit(f"check-layers: table lets {m} reach {hit}, which FORBIDDEN excludes")
    return result


def module_of(rel):
    """Module of a path relative to src/, by the longest matching prefix; None if none."""
    best, best_len = None, -1
    for m, (prefixes, _) in MODULES.items():
        for p in prefixes:
            if rel.startswith(p) and len(p) > best_len:
                best, best_len = m, len(p)
    return best


def resolve(root, rel_dir, inc):
    """('src', path under src/) or ('tests', path) or None for system/generated headers."""
    for base, kind in ((os.path.join(root, "src", rel_dir), "src"), (os.path.join(root, "src"), "src"),
                       (os.path.join(root, "tests"), "tests")):
        full = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(full):
            top = os.path.join(root, kind)
            return kind, os.path.relpath(full, top)
    return None


def check_includes(root, allowed):
    errors, unknown, edges = [], [], set()
    src = os.path.join(root, "src")
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(SOURCE_EXT):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), src)
            mod = module_of(rel)
            if mod is None:
                unknown.append(rel)
                continue
            is_test = bool(TEST_FILE.search(name))
            ok = set(allowed[mod])
            if is_test:
                for extra in TEST_EXTRA:
                    ok |= allowed[extra]
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = resolve(root, os.path.dirname(rel), m.group(1))
                    if target is None:
                        continue
                    kind, path = target
                    if kind == "tests":
                        if not is_test:
                            errors.append(f"src/{rel}:{lineno}: {mod} -> tests/{path} "
                                          "(only test files may include tests/ helpers)")
                        continue
                    dst = module_of(path)
                    if dst is None:
                        continue  # reported once as an unknown file
                    if dst != mod:
                        edges.add((mod, dst))
                    if dst not in ok:
                        errors.append(f"src/{rel}:{lineno}: {mod} -> {dst} "
                                      f"(#include \"{m.group(1)}\"; {mod} may use "
                                      f"{', '.join(sorted(allowed[mod] - {mod})) or 'nothing'})")
    return errors, unknown, edges


def cmake_targets(root):
    """Our target name -> module: the module of the target's first source file."""
    out = {}
    define = re.compile(r"(?:strata_library|add_library|add_executable)\(\s*([A-Za-z0-9_]+)([^)]*)\)")
    src = os.path.join(root, "src")
    for dirpath, _, files in os.walk(src):
        if "CMakeLists.txt" not in files:
            continue
        rel = os.path.relpath(dirpath, src).replace(os.sep, "/")
        with open(os.path.join(dirpath, "CMakeLists.txt"), encoding="utf-8") as f:
            for name, args in define.findall(f.read()):
                sources = [a for a in args.split() if a.endswith((".cc", ".cpp"))]
                first = sources[0] if sources else ""
                out[name] = module_of(f"{rel}/{first}" if rel != "." else first)
    return out


def check_cmake(root, allowed):
    dot = os.path.join(root, "docs", "module-graph.dot")
    if not os.path.isfile(dot):
        return [f"check-layers: {os.path.relpath(dot, root)} missing (run scripts/module-graph.sh)"]
    targets = cmake_targets(root)
    edge = re.compile(r'^\s*"([^"]+)"\s*->\s*"([^"]+)"')
    node = re.compile(r'^\s*"([^"]+)"\s*(\[|;)')
    errors = []
    with open(dot, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            names = edge.match(line)
            names = names.groups() if names else (node.match(line).group(1),) if node.match(line) else ()
            for n in names:
                if targets.get(n) is None:
                    errors.append(f"docs/module-graph.dot:{lineno}: target {n} is not defined in a "
                                  "src/ folder of the MODULES table (scripts/check-layers.py)")
            if len(names) == 2 and None not in (targets.get(names[0]), targets.get(names[1])):
                a, b = targets[names[0]], targets[names[1]]
                if b not in allowed[a]:
                    errors.append(f"docs/module-graph.dot:{lineno}: link {names[0]} -> {names[1]} "
                                  f"is the edge {a} -> {b}, which the table does not allow")
    return errors


def self_test(allowed):
    """The check must fail on a wrong include: a tiny tree with known edges."""
    import tempfile
    files = {
        "src/base/a.h": '#include "engine/kv/b.h"\n',          # upward: must be reported
        "src/engine/kv/b.h": '#include "base/a.h"\n',           # downward: fine
        "src/gateway/g.cc": '#include <vector>\n#include "server/s.h"\n',  # forbidden edge
        "src/server/s.h": '#include "engine/kv/b.h"\n',         # fine
        "src/engine/kv/b_test.cc": '#include "synth/x.h"\n#include "testing/t.h"\n',  # test: fine
        "src/synth/x.h": "",
        "tests/testing/t.h": "",
        "src/server/bad.cc": '#include "testing/t.h"\n',        # tests/ helper outside a test
        "src/newmod/n.h": "",                                    # no module
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                f.write(text)
        errors, unknown, _ = check_includes(tmp, allowed)
    got = sorted(e.split(": ")[0] for e in errors)
    want = ["src/base/a.h:1", "src/gateway/g.cc:2", "src/server/bad.cc:1"]
    if got != want or unknown != ["newmod/n.h"]:
        print(f"check-layers: self-test FAILED: got {got} / {unknown}, want {want} / ['newmod/n.h']")
        return 1
    print("check-layers: self-test ok (reports upward, forbidden and tests/ edges; allows the rest)")
    return 0


def print_table(allowed):
    for m, (prefixes, deps) in MODULES.items():
        print(f"{m:16} src/{', src/'.join(prefixes):28} uses: {', '.join(deps) or '-'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--no-cmake", action="store_true", help="skip the docs/module-graph.dot check")
    ap.add_argument("--print", action="store_true", help="print the table and exit")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a tiny tree")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    allowed = closure()
    if args.print:
        print_table(allowed)
        return 0
    if args.self_test:
        return self_test(allowed)
    errors, unknown, edges = check_includes(root, allowed)
    errors += [f"src/{u}: belongs to no module: add its folder to MODULES in "
               "scripts/check-layers.py" for u in unknown]
    if not args.no_cmake:
        errors += check_cmake(root, allowed)
    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} violation(s)")
        return 1
    print(f"check-layers: ok ({len(edges)} module edges, all downward)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
