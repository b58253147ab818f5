#!/usr/bin/env python3
"""Layer check: no #include from a module to one above it, no allowance nothing uses.

Usage: scripts/check-layers.py [--root DIR] [--no-cmake] [--print] [--print-markdown]
                               [--write-doc] [--self-test]

Scans every `#include "..."` in src/ (.h .cc .inc) and fails, naming file:line and the edge,
when a file of module A includes a file of module B and B is not A itself or below A in MODULES
(the allowed dependencies, closed transitively). It also checks, when docs/module-graph.dot is
present (scripts/module-graph.sh writes it from CMake), that every link edge between our
library targets is allowed by the same table, so the table, the includes and the CMake graph
cannot drift apart; and that every direct allowance A -> B of the table is used, by an include
from a non-test file of A into B or by a link edge A -> B of that graph ("allowance A -> B is
unused": drop it, or name the module below it that A really uses). Last, the table of layers in
docs/architecture.md (between the `layers:begin` / `layers:end` marker comments) must be the one
`--print-markdown` writes from MODULES; `--write-doc` rewrites it there. `--print` prints the
table as text.

Rules beyond the table:
  - Every source file under src/ must belong to a module (longest folder/file prefix wins); a new
    folder needs a line in MODULES first.
  - Test files may also include the test helpers of tests/: test units (`*_test.cc`, `*_bench.cc`,
    `*_fuzz*`) and test helpers beside the code (`*test_util*`). Test units may in addition
    include the modules in TEST_EXTRA (synth builds test models); a helper that needs synth lives
    in tests/testing/, above every module.
  - An include is resolved against the including file's folder first, then src/, then tests/.
    An include that resolves nowhere is a system or generated header and is ignored.
  - An allowance into (or out of) a module with no source file yet is a plan, not checked for use.
Python 3 standard library only. Runs in well under a second (CI runs it before the build).
"""

import argparse
import difflib
import os
import re
import sys

# module: (path prefixes under src/, allowed direct dependencies). Order: bottom to top.
# A prefix matches a folder ("engine/kv/") or, without the slash, files ("gateway/config."). Every
# dependency listed must be used directly (an include or a link); "may use" is closed
# transitively, so list the module a module really includes, not one above it that reaches it.
MODULES = {
    "base": (["base/"], []),
    "tensor": (["tensor/"], ["base"]),
    "kernels": (["kernels/"], ["tensor"]),
    "gguf": (["gguf/"], ["tensor"]),
    "tokenizer/chat": (["tokenizer/chat/"], ["base"]),  # the Jinja2 chat-template interpreter
    "tokenizer": (["tokenizer/"], ["gguf"]),
    "model": (["model/"], ["gguf", "kernels"]),
    "lora": (["lora/"], ["model"]),  # LoRA adapters (GGUF), the registry, the low-rank product
    "cachekey": (["cachekey/"], ["base"]),  # block hashing; the gateway computes the same keys
    "protocol": (["protocol/"], ["base"]),  # the wire contract: priorities, tiers, headers, fields
    "yamlcfg": (["yamlcfg/"], ["base"]),  # the strict YAML toolkit of the config files
    "http": (["http/"], ["base"]),  # Beast server/client, SSE, Prometheus text; Boost only
    "trace": (["trace/"], ["http"]),  # W3C trace context, spans, the OTLP/HTTP exporter
    # The OpenAI-body fields the replica and the gateway both read (model, lora, priority,
    # max_tokens, chat messages): protocol's terms through http's JSON accessor.
    "protocol/openai": (["protocol/openai/"], ["protocol", "http"]),
    # engine/: sampler and kv at the bottom; kv <- kvtier; kv <- runner; sampler, kv, runner <-
    # sched (sees the tiers only through its port); everything <- serving.
    "engine/sampler": (["engine/sampler/"], ["model", "tokenizer"]),
    "engine/kv": (["engine/kv/"], ["kernels", "cachekey", "protocol"]),
    "engine/kvtier": (["engine/kvtier/"], ["engine/kv"]),
    "engine/runner": (["engine/runner/"], ["engine/kv", "lora"]),
    "engine/sched": (["engine/sched/"], ["engine/sampler", "engine/kv", "engine/runner"]),
    "engine/serving": (["engine/serving/"], ["engine/sched", "engine/kvtier", "yamlcfg"]),
    "synth": (["synth/"], ["gguf", "kernels", "tokenizer", "lora"]),  # a tool module
    # The server uses the engine's API (sched) and the tiers' stats (kvtier); replica builds the
    # serving engine and hands it over.
    "server": (["server/"], ["engine/sched", "engine/kvtier", "http", "tokenizer", "tokenizer/chat",
                             "trace", "protocol/openai"]),
    # One replica assembled from one ReplicaConfig (its config tree and codec live here too): the
    # server over the serving engine, the model, tokenizer, LoRA registry and tracer (app/ runs it
    # for serve and bench offline).
    "replica": (["replica/"], ["engine/serving", "server"]),
    "bench": (["bench/"], ["http", "tokenizer", "gguf"]),
    # The gateway's config library (strata_gateway_config): the YAML, the route list and the
    # shared vocabulary, all the control plane needs of the gateway.
    "gateway/config": (["gateway/config.", "gateway/routes.", "gateway/types."],
                       ["http", "yamlcfg", "tokenizer/chat", "protocol"]),
    "gateway": (["gateway/"], ["gateway/config", "http", "trace", "cachekey", "tokenizer",
                               "tokenizer/chat", "protocol/openai"]),
    "control": (["control/"], ["http", "gateway/config", "yamlcfg"]),
    "app": (["app/"], ["engine/serving", "replica", "bench", "synth", "gateway", "control"]),
}

# Modules that must never be reached from these, whatever the table above says (a guard against
# a well-meant edit of the table).
FORBIDDEN = {
    "gateway": ["engine/", "server"],
    "control": ["engine/", "server", "gateway"],
    "http": ["engine/", "server", "model", "tokenizer"],
    "trace": ["engine/", "server", "gateway", "model", "tokenizer"],
}

# Test units may include these modules too (and tests/ helpers); test helpers only tests/ helpers.
TEST_EXTRA = ["synth"]
TEST_UNIT = re.compile(r"(_test\.cc|_bench\.cc|_fuzz)")
TEST_HELPER = re.compile(r"test_util")
SOURCE_EXT = (".h", ".cc", ".inc", ".hpp", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

DOC = os.path.join("docs", "architecture.md")
DOC_BEGIN = "<!-- layers:begin"
DOC_END = "<!-- layers:end -->"


def closure(modules=None, forbidden=None):
    """module -> set of modules it may include (itself and everything below it)."""
    modules = MODULES if modules is None else modules
    forbidden = FORBIDDEN if forbidden is None else forbidden
    memo = {}

    def visit(m, stack):
        if m in memo:
            return memo[m]
        if m in stack:
            sys.exit(f"check-layers: the table has a cycle through {m}")
        out = {m}
        for d in modules[m][1]:
            if d not in modules:
                sys.exit(f"check-layers: {m} depends on unknown module {d}")
            out |= visit(d, stack | {m})
        memo[m] = out
        return out

    result = {m: visit(m, frozenset()) for m in modules}
    for m, bad in forbidden.items():
        for b in bad:
            hit = [d for d in result[m] if d == b or (b.endswith("/") and d.startswith(b))]
            if hit:
                sys.exit(f"check-layers: table lets {m} reach {hit}, which FORBIDDEN excludes")
    return result


def module_of(rel, modules=None):
    """Module of a path relative to src/, by the longest matching prefix; None if none."""
    best, best_len = None, -1
    for m, (prefixes, _) in (MODULES if modules is None else modules).items():
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


def check_includes(root, allowed, modules=None):
    """(errors, unknown files, module edges of non-test files, modules that have a source file)."""
    errors, unknown, edges, sourced = [], [], set(), set()
    src = os.path.join(root, "src")
    for dirpath, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            if not name.endswith(SOURCE_EXT):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), src).replace(os.sep, "/")
            mod = module_of(rel, modules)
            if mod is None:
                unknown.append(rel)
                continue
            sourced.add(mod)
            is_unit = bool(TEST_UNIT.search(name))
            is_test = is_unit or bool(TEST_HELPER.search(name))
            ok = set(allowed[mod])
            if is_unit:
                for extra in TEST_EXTRA:
                    ok |= allowed.get(extra, set())
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
                    dst = module_of(path.replace(os.sep, "/"), modules)
                    if dst is None:
                        continue  # reported once as an unknown file
                    if dst != mod and not is_test:
                        edges.add((mod, dst))
                    if dst not in ok:
                        errors.append(f"src/{rel}:{lineno}: {mod} -> {dst} "
                                      f"(#include \"{m.group(1)}\"; {mod} may use "
                                      f"{', '.join(sorted(allowed[mod] - {mod})) or 'nothing'})")
    return errors, unknown, edges, sourced


def cmake_targets(root, modules=None):
    """Our target name -> module: the module of the target's first source file (its folder when
    the sources are a variable)."""
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
                out[name] = module_of(f"{rel}/{first}" if rel != "." else first, modules)
    return out


def check_cmake(root, allowed, modules=None):
    """(errors, module edges of the link graph)."""
    dot = os.path.join(root, "docs", "module-graph.dot")
    if not os.path.isfile(dot):
        return [f"check-layers: {os.path.relpath(dot, root)} missing (run scripts/module-graph.sh)"], set()
    targets = cmake_targets(root, modules)
    edge = re.compile(r'^\s*"([^"]+)"\s*->\s*"([^"]+)"')
    node = re.compile(r'^\s*"([^"]+)"\s*(\[|;)')
    errors, links = [], set()
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
                if a != b:
                    links.add((a, b))
                if b not in allowed[a]:
                    errors.append(f"docs/module-graph.dot:{lineno}: link {names[0]} -> {names[1]} "
                                  f"is the edge {a} -> {b}, which the table does not allow")
    return errors, links


def check_unused(modules, includes, links, sourced):
    """Every direct allowance A -> B must be used: an include from a non-test file of A into B or
    a link A -> B. A module with no source file yet (protocol, issue 42, while it is written) is a
    plan: the allowances into and out of it are not checked until its first file lands."""
    errors = []
    for a, (_, deps) in modules.items():
        for b in deps:
            if a not in sourced or b not in sourced:
                continue
            if (a, b) not in includes and (a, b) not in links:
                errors.append(f"scripts/check-layers.py: allowance {a} -> {b} is unused (no "
                              f"non-test file of {a} includes {b}, no target of {a} links it): "
                              f"drop it from MODULES, or name what {a} really uses")
    return errors


def markdown_table(modules=None, forbidden=None):
    """The table of layers for docs/architecture.md, one row per module, bottom to top."""
    modules = MODULES if modules is None else modules
    forbidden = FORBIDDEN if forbidden is None else forbidden
    lines = ["| Module | Under `src/` | May use (directly; closed transitively) |",
             "|---|---|---|"]
    for m, (prefixes, deps) in modules.items():
        where = ", ".join(f"`{p}*`" if not p.endswith("/") else f"`{p}`" for p in prefixes)
        uses = ", ".join(deps) or "—"
        if m in forbidden:
            uses += " — never " + ", ".join(forbidden[m])
        lines.append(f"| {m} | {where} | {uses} |")
    return "\n".join(lines) + "\n"


def doc_table(text):
    """(start, end) of the generated table between the markers of `text`, or None."""
    begin = text.find(DOC_BEGIN)
    if begin < 0:
        return None
    start = text.find("\n", begin) + 1
    end = text.find(DOC_END, start)
    return (start, end) if start > 0 and end >= 0 else None


def check_doc(root, table):
    path = os.path.join(root, DOC)
    if not os.path.isfile(path):
        return [f"check-layers: {DOC} missing"]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    span = doc_table(text)
    if span is None:
        return [f"{DOC}: no `{DOC_BEGIN} ... -->` / `{DOC_END}` markers around the table of "
                "layers (scripts/check-layers.py --print-markdown writes it)"]
    have = text[span[0]:span[1]]
    if have == table:
        return []
    diff = difflib.unified_diff(have.splitlines(), table.splitlines(), f"{DOC} (checked in)",
                                "MODULES (scripts/check-layers.py)", lineterm="", n=0)
    return [f"{DOC}: the table of layers differs from MODULES in scripts/check-layers.py; run "
            "scripts/check-layers.py --write-doc\n" + "\n".join(diff)]


def write_doc(root, table):
    """Rewrites the table between the markers of the doc; an error message, or None."""
    path = os.path.join(root, DOC)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    span = doc_table(text)
    if span is None:
        return f"check-layers: {DOC} has no {DOC_BEGIN} ... --> / {DOC_END} markers"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:span[0]] + table + text[span[1]:])
    return None


def run_checks(root, modules=None, forbidden=None, cmake=True):
    """Every check on the tree at `root`: (errors, include edges, modules nothing uses yet)."""
    modules = MODULES if modules is None else modules
    allowed = closure(modules, forbidden)
    errors, unknown, edges, sourced = check_includes(root, allowed, modules)
    errors += [f"src/{u}: belongs to no module: add its folder to MODULES in "
               "scripts/check-layers.py" for u in unknown]
    if cmake:  # the unused check needs the link edges too
        cmake_errors, links = check_cmake(root, allowed, modules)
        errors += cmake_errors + check_unused(modules, edges, links, sourced)
    errors += check_doc(root, markdown_table(modules, forbidden))
    planned = sorted(set(modules) - sourced)
    return errors, edges, planned


def write_tree(tmp, files):
    for rel, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
        with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    """The checks must fail on what they guard against: tiny trees with known faults."""
    import tempfile
    failures = []
    # 1. Includes, on the real table: upward, forbidden, tests/ outside a test, a helper's synth.
    files = {
        "src/base/a.h": '#include "engine/kv/b.h"\n',          # upward: must be reported
        "src/engine/kv/b.h": '#include "base/a.h"\n',           # downward: fine
        "src/gateway/g.cc": '#include <vector>\n#include "server/s.h"\n',  # forbidden edge
        "src/server/s.h": '#include "engine/kv/b.h"\n',         # fine
        "src/engine/kv/b_test.cc": '#include "synth/x.h"\n#include "testing/t.h"\n',  # test: fine
        "src/engine/kv/kv_test_util.h": '#include "testing/t.h"\n#include "synth/x.h"\n',  # 2: up
        "src/synth/x.h": "",
        "tests/testing/t.h": "",
        "src/server/bad.cc": '#include "testing/t.h"\n',        # tests/ helper outside a test
        "src/newmod/n.h": "",                                    # no module
    }
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(tmp, files)
        errors, unknown, _, _ = check_includes(tmp, closure())
    got = sorted(e.split(": ")[0] for e in errors)
    want = ["src/base/a.h:1", "src/engine/kv/kv_test_util.h:2", "src/gateway/g.cc:2",
            "src/server/bad.cc:1"]
    if got != want or unknown != ["newmod/n.h"]:
        failures.append(f"includes: got {got} / {unknown}, want {want} / ['newmod/n.h']")

    # 2. Unused allowances and the doc's table, on a small table of their own.
    modules = {
        "base": (["base/"], []),
        "lib": (["lib/"], ["base"]),      # used by a link only
        "low": (["low/"], ["base"]),
        "mid": (["mid/"], ["lib", "low"]),  # low: only a test includes it -> unused
        "plan": (["plan/"], ["base"]),    # no source file yet: unchecked
        "top": (["top/"], ["mid", "plan"]),  # plan: unchecked
    }
    files = {
        "src/base/b.h": "",
        "src/lib/l.h": "",
        "src/lib/CMakeLists.txt": "strata_library(t_lib SOURCES l.cc DEPS t_base)\n",
        "src/base/CMakeLists.txt": "strata_library(t_base SOURCES b.cc)\n",
        "src/low/w.h": '#include "base/b.h"\n',
        "src/mid/m.h": '#include "lib/l.h"\n',
        "src/mid/m_test.cc": '#include "low/w.h"\n',
        "src/top/t.h": '#include "mid/m.h"\n',
        "docs/module-graph.dot": '"t_base";\n"t_lib";\n"t_lib" -> "t_base";\n',
    }
    table = markdown_table(modules, {})
    doc = f"# x\n\n{DOC_BEGIN} generated -->\n{table}{DOC_END}\n\nprose\n"
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(tmp, files)
        write_tree(tmp, {DOC: doc})
        errors, _, planned = run_checks(tmp, modules, {})
        want = ["scripts/check-layers.py: allowance mid -> low is unused"]
        if [e.split(" (")[0] for e in errors] != want or planned != ["plan"]:
            failures.append(f"unused: got {errors} / {planned}, want {want} / ['plan']")
        write_tree(tmp, {DOC: doc.replace("| lib, low |", "| lib |")})  # 3. a stale doc table
        errors, _, _ = run_checks(tmp, modules, {})
        if len(errors) != 2 or "differs from MODULES" not in errors[1] or "+| mid |" not in errors[1]:
            failures.append(f"stale doc: got {errors}")
        write_tree(tmp, {DOC: "# x\n" + table})  # 4. no markers
        errors, _, _ = run_checks(tmp, modules, {})
        if len(errors) != 2 or "markers" not in errors[1]:
            failures.append(f"doc without markers: got {errors}")
        if write_doc(tmp, table) is None:
            failures.append("--write-doc wrote a doc without markers")
        write_tree(tmp, {DOC: doc.replace("| lib, low |", "| lib |")})  # 5. --write-doc fixes it
        written = write_doc(tmp, table)
        errors, _, _ = run_checks(tmp, modules, {})
        with open(os.path.join(tmp, DOC), encoding="utf-8") as f:
            if written is not None or f.read() != doc:
                failures.append("--write-doc did not restore the doc")
        if len(errors) != 1:
            failures.append(f"after --write-doc: got {errors}")
    for f in failures:
        print(f"check-layers: self-test FAILED: {f}")
    if failures:
        return 1
    print("check-layers: self-test ok (reports upward, forbidden and tests/ edges, a test helper's "
          "synth, unused allowances and a stale or unmarked doc table; allows the rest)")
    return 0


def print_table():
    for m, (prefixes, deps) in MODULES.items():
        print(f"{m:16} src/{', src/'.join(prefixes):28} uses: {', '.join(deps) or '-'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--no-cmake", action="store_true",
                    help="skip the docs/module-graph.dot check (and so the unused-allowance check)")
    ap.add_argument("--print", action="store_true", help="print the table and exit")
    ap.add_argument("--print-markdown", action="store_true",
                    help=f"print the table of layers of {DOC} and exit")
    ap.add_argument("--write-doc", action="store_true",
                    help=f"write the table of layers into {DOC} (between its markers) and exit")
    ap.add_argument("--self-test", action="store_true", help="check the checker on tiny trees")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    closure()  # the table itself: no cycle, no unknown module, nothing FORBIDDEN reachable
    if args.print:
        print_table()
        return 0
    if args.print_markdown:
        sys.stdout.write(markdown_table())
        return 0
    if args.write_doc:
        error = write_doc(root, markdown_table())
        print(error or f"check-layers: wrote the table of layers into {DOC}")
        return 1 if error else 0
    if args.self_test:
        return self_test()
    errors, edges, planned = run_checks(root, cmake=not args.no_cmake)
    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} violation(s)")
        return 1
    used = "" if args.no_cmake else " and every allowance used"
    note = f"; no source yet, allowances unchecked: {', '.join(planned)}" if planned else ""
    print(f"check-layers: ok ({len(edges)} module edges, all downward{used}; the table of "
          f"{DOC} matches{note})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
