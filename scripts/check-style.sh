#!/usr/bin/env bash
# Style check of the C++ tree: clang-format on every file, clang-tidy on the files changed since
# the enforcement base.
#
# Usage: scripts/check-style.sh [--base REV] [--fix] [--no-tidy] [--build DIR] [-j N] [--list]
#   --base REV  compare against REV instead of the enforcement base (e.g. origin/main)
#   --fix       rewrite every C++ file with clang-format -i (tidy findings are not fixed)
#   --no-tidy   clang-format only (no build directory needed)
#   --build DIR the build directory holding compile_commands.json (default: build)
#   -j N        clang-tidy processes (default 2)
#   --list      print the files clang-tidy would check and exit
#
# clang-format: every C++ file (.h .cc .inc .cpp .hpp under src/ and tests/) that git tracks, plus
# new untracked ones, must be clean (clang-format --dry-run -Werror; a few seconds for the tree).
#
# clang-tidy (the root .clang-tidy: naming, bugprone, performance; every finding an error): only
# the files that differ between the enforcement base and the working tree (committed or not, plus
# new untracked files), deleted files excluded — clang-tidy needs a compile and takes minutes.
#
# The enforcement base: .ci/style-base holds one commit id, the commit from which clang-tidy
# enforcement started. CI runs on a full clone of main, where that commit is part of the history,
# so "changed since the base" needs no merge-base guesswork and no remote. Every file touched after
# that commit must be tidy-clean, so the checked part of the tree only grows. Moving the base
# forward is an ordinary reviewed change of that file. Files that only the tree-wide clang-format
# commit named in .ci/format-commit touched are not clang-tidy changes (layout only). STRATA_STYLE_BASE in the environment
# overrides the file, --base overrides both. A base that is not in the history (a shallow clone)
# is an error, not a silent pass.
#
# clang-tidy: the .cc files among the changed ones that are in compile_commands.json, plus, for
# each changed header, one translation unit that includes it (its own .cc when there is one);
# headers are reported through --header-filter, which names exactly the changed headers (so a
# finding in an untouched header does not fail a change that merely includes it). The build is
# GCC; clang-tidy reads the same flags with the GCC-only warning flags tolerated
# (-Wno-unknown-warning-option), compiler warnings not turned into errors (the GCC build owns
# those), and Boost.Asio told that clang's C++20 coroutines exist (its 1.74 detection predates
# clang 14 with libstdc++).
# Tools: Debian 12's clang-format and clang-tidy (version 14; scripts/install-deps.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

base="${STRATA_STYLE_BASE:-}"
fix=0 tidy=1 build=build jobs=2 list=0
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base="$2"; shift 2 ;;
    --fix) fix=1; shift ;;
    --no-tidy) tidy=0; shift ;;
    --build) build="$2"; shift 2 ;;
    -j) jobs="$2"; shift 2 ;;
    --list) list=1; shift ;;
    *) echo "usage: $0 [--base REV] [--fix] [--no-tidy] [--build DIR] [-j N] [--list]" >&2; exit 2 ;;
  esac
done
if [ -z "$base" ]; then
  base="$(grep -v '^\s*#' .ci/style-base | grep -m1 -oE '[0-9a-f]{7,40}' || true)"
fi
if [ -z "$base" ] || ! git rev-parse -q --verify "$base^{commit}" > /dev/null; then
  echo "check-style: base '$base' is not a commit of this clone (.ci/style-base; a shallow" \
       "clone? fetch the full history)" >&2
  exit 2
fi

cxx_files() { grep -E '\.(h|cc|inc|cpp|hpp)$' | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done; }
mapfile -t all_files < <(
  { git ls-files -- src tests; git ls-files --others --exclude-standard -- src tests; } | cxx_files)
# The tree-wide format commit (.ci/format-commit) changed only layout: a file that only it touched
# since the base is not a clang-tidy change (tidy findings there predate enforcement).
fmt_commit="$(grep -v '^\s*#' .ci/format-commit 2> /dev/null | grep -m1 -oE '[0-9a-f]{7,40}' || true)"
changed_since_base() {
  if [ -n "$fmt_commit" ] && git rev-parse -q --verify "$fmt_commit^{commit}" > /dev/null &&
      git merge-base --is-ancestor "$base" "$fmt_commit"; then
    git diff --name-only --diff-filter=d "$base" "$fmt_commit^" -- src tests
    git diff --name-only --diff-filter=d "$fmt_commit" -- src tests
  else
    git diff --name-only --diff-filter=d "$base" -- src tests
  fi
}
mapfile -t files < <(
  { changed_since_base
    git ls-files --others --exclude-standard -- src tests; } | cxx_files)
echo "check-style: ${#all_files[@]} C++ file(s) in the tree, ${#files[@]} changed since" \
     "$(git rev-parse --short "$base")"
if [ "$list" = 1 ]; then printf '%s\n' "${files[@]}"; exit 0; fi

status=0
# --- clang-format: the whole tree -------------------------------------------------------------
if [ ${#all_files[@]} -eq 0 ]; then
  echo "check-style: no C++ files"
elif [ "$fix" = 1 ]; then
  clang-format -i --style=file "${all_files[@]}"
  echo "check-style: clang-format applied to ${#all_files[@]} file(s)"
elif ! clang-format --dry-run -Werror --style=file "${all_files[@]}"; then
  echo "check-style: clang-format: the files above are not formatted" \
       "(scripts/check-style.sh --fix --no-tidy formats the tree)" >&2
  status=1
else
  echo "check-style: clang-format ok (${#all_files[@]} files)"
fi
[ ${#files[@]} -eq 0 ] && exit $status

# --- clang-tidy -----------------------------------------------------------------------------
if [ "$tidy" = 1 ]; then
  db="$build/compile_commands.json"
  if [ ! -f "$db" ]; then
    echo "check-style: $db missing (configure first: cmake --preset release)" >&2
    exit 2
  fi
  # Translation units and the header filter, from the compile database and the changed files.
  mapfile -t plan < <(python3 - "$root" "$db" "${files[@]}" <<'EOF'
import json, os, re, sys
root, db, changed = sys.argv[1], sys.argv[2], sys.argv[3:]
tus = [os.path.normpath(os.path.join(e["directory"], e["file"])) for e in json.load(open(db))]
tus = [t for t in dict.fromkeys(tus) if t.startswith(root + "/src/") or t.startswith(root + "/tests/")]
tu_set = set(tus)
picked, headers = [], []
def includes(tu, rel):
    pat = re.compile(r'^\s*#\s*include\s+"(' + re.escape(rel) + '|' + re.escape(os.path.basename(rel)) + ')"', re.M)
    try:
        return pat.search(open(tu, encoding="utf-8", errors="replace").read()) is not None
    except OSError:
        return False
for f in changed:
    full = os.path.join(root, f)
    if full in tu_set:
        picked.append(full)
        continue
    if f.endswith((".cc", ".cpp")):
        continue  # not compiled in this configuration (e.g. a fuzz target): format only
    headers.append(full)
    stem = os.path.splitext(full)[0]
    own = [t for t in (stem + ".cc", stem + ".cpp") if t in tu_set]
    rel = os.path.relpath(full, os.path.join(root, "src" if f.startswith("src/") else "tests"))
    user = own or [t for t in tus if os.path.dirname(t) == os.path.dirname(full) and includes(t, rel)] \
               or [t for t in tus if includes(t, rel)]
    if user:
        picked.append(user[0])
    else:
        print(f"note: no translation unit includes {f}; clang-tidy skips it", file=sys.stderr)
print("|".join("^" + re.escape(h) + "$" for h in headers) or "^$")
for t in dict.fromkeys(picked):
    print("^" + re.escape(t) + "$")
EOF
  )
  if [ ${#plan[@]} -eq 0 ]; then
    echo "check-style: could not plan the clang-tidy run (python3 failed above)" >&2
    exit 2
  fi
  header_filter="${plan[0]}"
  units=("${plan[@]:1}")
  if [ ${#units[@]} -eq 0 ]; then
    echo "check-style: clang-tidy: no translation unit to check"
  else
    echo "check-style: clang-tidy on ${#units[@]} translation unit(s), -j$jobs"
    if ! run-clang-tidy -p "$build" -j "$jobs" -quiet -header-filter="$header_filter" \
        -extra-arg=-Wno-unknown-warning-option -extra-arg=-Wno-error \
        -extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1 -extra-arg=-DBOOST_ASIO_HAS_STD_COROUTINE=1 \
        "${units[@]}" > "$build/check-style-tidy.log" 2>&1; then
      grep -vE '^(clang-tidy-[0-9]+ |[0-9]+ warnings? (and [0-9]+ errors? )?generated|Suppressed |Use -header-filter|Error while processing)' \
        "$build/check-style-tidy.log" | sed 's/\x1b\[[0-9;]*m//g' >&2 || true
      echo "check-style: clang-tidy found problems (full log: $build/check-style-tidy.log)" >&2
      status=1
    else
      echo "check-style: clang-tidy ok"
    fi
  fi
fi
exit $status
