#!/usr/bin/env python3
"""Fails on nlohmann accessors that throw on a wrong type, in the code that reads client JSON.

Every client JSON field is read through src/http/json_fields.h (http::Fields, AsInt, AsString,
TokenIds), which answers a 400 naming the field; `.value(`, `.get<`, `.get_ref<` and `.at(` throw
on a wrong type or a missing key and end the request as a 500 (or, before the last-resort guard,
the process). This scans src/server, src/http and src/gateway (not tests, not json_fields.cc itself) and fails
on any such call unless the line, or the line above it, carries the reviewed-use marker
`json-access:` followed by why (e.g. `// json-access: engine data`, `// json-access: is_string
checked`). A textual check on purpose: cheap, no compiler, and it errs on the side of asking.

  scripts/check-json-access.py             scan the tree, exit 1 on findings
  scripts/check-json-access.py --self-test check the matcher itself
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIRS = ["src/server", "src/http", "src/gateway"]
EXEMPT = {"src/http/json_fields.cc"}
PATTERN = re.compile(r"\.\s*(value|at)\s*\(|\.\s*get(_ref)?\s*<")
MARKER = "json-access:"


def strip_comment_and_strings(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    return line.split("//", 1)[0]


def findings(path, text):
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not PATTERN.search(strip_comment_and_strings(line)):
            continue
        if MARKER in line or (i > 0 and MARKER in lines[i - 1]):
            continue
        out.append(f"{path}:{i + 1}: {line.strip()}")
    return out


def self_test():
    bad = ['x = body.value("a", 1);', "int v = j.get<int>();", "j.at(\"k\");",
           "s = j.get_ref<const std::string&>();", "x = j . value (k, 0);"]
    good = ['x = 1;  // body.value("a")', 's = "j.get<int>()";',
            "v = j.get<int>();  // json-access: engine data",
            "// json-access: is_number checked\nv = j.get<int>();"]
    for b in bad:
        assert findings("t", b), b
    for g in good:
        assert not findings("t", g), g
    print("check-json-access: self-test ok")


def main():
    if "--self-test" in sys.argv:
        return self_test()
    problems = []
    for d in DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            rel = p.relative_to(ROOT).as_posix()
            if p.suffix not in (".cc", ".h") or rel in EXEMPT or p.name.endswith("_test.cc"):
                continue
            problems += findings(rel, p.read_text(encoding="utf-8", errors="replace"))
    if problems:
        print("check-json-access: throwing JSON accessors on (possibly) client data; read the field")
        print("through src/http/json_fields.h, or mark a reviewed use with `// json-access: why`:")
        print("\n".join(problems))
        return 1
    print("check-json-access: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
