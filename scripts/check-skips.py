#!/usr/bin/env python3
"""Fails when ctest skipped a test that is not on the allowlist.

Usage: scripts/check-skips.py CTEST_LOG [ALLOWLIST] [--self-test]

CTEST_LOG is what `ctest` printed (the .ci/run tests step tees it to build/ctest.log); a skipped
test is listed there as "NN - Name (Skipped)" under "The following tests did not run:" (GoogleTest's
GTEST_SKIP, which gtest_discover_tests maps to ctest's skip). ALLOWLIST (default .ci/allowed-skips)
holds one rule per line: a Python regular expression matched against the whole test name, a TAB or
two spaces, and the reason the test may skip on a machine that has everything
scripts/install-deps.sh installs (an ISA this CPU lacks, a benchmark that runs only on request).
'#' starts a comment. The allowed skips are counted per rule (with
its reason); a skip without a rule fails
(exit 1): a test that needs only what install-deps provides must run, not skip. A rule that matched
nothing is fine (the CPU may have the ISA).
"""
import re
import sys

SKIP_LINE = re.compile(r"^\s*\d+\s+-\s+(\S.*?)\s+\(Skipped\)\s*$")


def parse_allowlist(text):
    rules = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        parts = re.split(r"\t+| {2,}", line.strip(), maxsplit=1)
        if len(parts) != 2 or not parts[1].strip():
            raise ValueError(f"allowlist line {n}: want 'REGEX<TAB>reason', got {raw!r}")
        rules.append((re.compile(parts[0]), parts[1].strip()))
    return rules


def skipped_tests(log_text):
    # A parameterized test's line carries "  # GetParam() = ..." after its name: not part of it.
    return [re.sub(r"\s+#\s.*$", "", m.group(1))
            for m in map(SKIP_LINE.match, log_text.splitlines()) if m]


def check(log_text, rules, out):
    bad = 0
    skips = skipped_tests(log_text)
    per_rule = {}
    for name in skips:
        reason = next((r for rx, r in rules if rx.fullmatch(name)), None)
        if reason is None:
            bad += 1
            out.write(f"check-skips: NOT ALLOWED: {name} skipped (it needs only what "
                      f"scripts/install-deps.sh provides, so it must run)\n")
        else:
            per_rule.setdefault(reason, []).append(name)
    for reason, names in per_rule.items():
        out.write(f"check-skips: allowed: {len(names)} skipped ({names[0]}, ...): {reason}\n")
    out.write(f"check-skips: {len(skips)} skipped, {bad} not allowed\n")
    return bad == 0


def self_test():
    import io
    rules = parse_allowlist("# c\nKernels/.*avx512.*\tCPU lacks AVX-512\nRunnerBench\\..*  by design\n")
    log = ("The following tests did not run:\n"
           "\t 12 - Kernels/MatMul.Q4/avx512 (Skipped)\n"
           "\t 40 - RunnerBench.DecodeStep16vs1 (Skipped)\n"
           "\t 41 - AllIsas/VecOps.X/avx512  # GetParam() = 4-byte object <02-00 00-00> (Skipped)\n")
    rules.append((re.compile(r"AllIsas/VecOps\..*/avx512"), "CPU lacks AVX-512"))
    assert check(log, rules, io.StringIO())
    assert not check(log + "\t 77 - Serve.OfficialOpenAINodeClient (Skipped)\n", rules, io.StringIO())
    assert skipped_tests("100% tests passed, 0 tests failed out of 3\n") == []
    try:
        parse_allowlist("no-reason-here\n")
        raise AssertionError("a rule without a reason must be rejected")
    except ValueError:
        pass
    print("check-skips: self-test ok")


def main(argv):
    if "--self-test" in argv:
        self_test()
        return 0
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    allow = argv[2] if len(argv) > 2 else ".ci/allowed-skips"
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        log_text = f.read()
    with open(allow, encoding="utf-8") as f:
        rules = parse_allowlist(f.read())
    return 0 if check(log_text, rules, sys.stdout) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
