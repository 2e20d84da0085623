#!/usr/bin/env python3
"""Mutants' editing and bookkeeping for scripts/mutants.sh: apply one mutant to a throwaway copy
of the tree, and fail loudly when it no longer applies.

    apply.py named TREE MUTANT.toml       # a named mutant: exact search/replace edits
    apply.py check TREE                   # every mutant of mutants/named still applies to TREE
                                          # (nothing written; scripts/lint.sh's `mutants` step)
    apply.py field MUTANT.toml KEY        # print a field of a named mutant (lists: one a line)
    apply.py listed TREE LIST.json INDEX  # mutant INDEX of `cargo mutants --list --json`
    apply.py count LIST.json              # print how many mutants that list holds
    apply.py describe LIST.json INDEX     # print mutant INDEX's name in that list
    apply.py sync SRC DST                 # make DST a copy of SRC, touching only files that differ
    apply.py test-binaries DIR            # copy the test executables named by cargo's
                                          # --message-format=json (on stdin) to DIR/it-NAME

A named mutant is a TOML file (see mutants/README.md): each [[edit]] names a file, the exact
text `old` it expects to find there `count` times (default 1), and the text `new` that replaces
it. An edit whose `old` text is found any other number of times is an error (exit 3): the source
moved under the mutant, and the mutant must be re-anchored rather than silently skipped.

`named` and `listed` print the files they changed, one a line, relative to TREE.
"""

import json
import shutil
import sys
import tomllib
from pathlib import Path


def fail(message):
    print(f"apply.py: {message}", file=sys.stderr)
    sys.exit(3)


def load(path):
    with open(path, "rb") as f:
        m = tomllib.load(f)
    for key in ("what", "edit"):
        if key not in m:
            fail(f"{path}: no `{key}`")
    return m


def named(tree, path, write=True):
    m = load(path)
    changed = []
    for i, edit in enumerate(m["edit"], 1):
        target = Path(tree) / edit["file"]
        if not target.is_file():
            fail(f"{Path(path).stem}: edit {i}: {edit['file']} does not exist")
        text = target.read_text()
        old, new, count = edit["old"], edit["new"], edit.get("count", 1)
        found = text.count(old)
        if found != count:
            fail(
                f"{Path(path).stem}: edit {i} no longer applies to {edit['file']}: its `old` text "
                f"is found {found} time(s), expected {count}. Re-anchor the mutant."
            )
        if old == new:
            fail(f"{Path(path).stem}: edit {i} changes nothing")
        if write:
            target.write_text(text.replace(old, new))
        if edit["file"] not in changed:
            changed.append(edit["file"])
    if write:
        print("\n".join(changed))


def check(tree):
    mutants = sorted((Path(__file__).parent / "named").glob("*.toml"))
    for path in mutants:
        named(tree, path, write=False)
    print(f"{len(mutants)} named mutants: each still applies")


def field(path, key):
    value = load(path).get(key)
    if value is None:
        return
    if isinstance(value, list):
        print("\n".join(str(v) for v in value))
    elif isinstance(value, bool):
        print("true" if value else "false")
    else:
        print(value)


def listed(tree, listing, index):
    """Replace the mutant's span (1-based lines, 1-based columns of characters) by its text."""
    mutants = json.loads(Path(listing).read_text())
    m = mutants[int(index)]
    rel = m["source_file"]["path"] if isinstance(m.get("source_file"), dict) else m["file"]
    span = m["span"]
    target = Path(tree) / rel
    lines = target.read_text().split("\n")
    (l1, c1), (l2, c2) = (span["start"]["line"], span["start"]["column"]), (span["end"]["line"], span["end"]["column"])
    if l1 < 1 or l2 > len(lines):
        fail(f"listed mutant {index}: span {l1}..{l2} outside {rel}")
    head = "\n".join(lines[: l1 - 1] + [lines[l1 - 1][: c1 - 1]])
    tail = "\n".join([lines[l2 - 1][c2 - 1 :]] + lines[l2:])
    target.write_text(head + m["replacement"] + tail)
    print(rel)


def count(listing):
    print(len(json.loads(Path(listing).read_text())))


def describe(listing, index):
    m = json.loads(Path(listing).read_text())[int(index)]
    print(m["name"] if "name" in m else m)


def test_binaries(directory):
    """Copy each test executable that cargo's JSON messages (stdin) name to DIRECTORY/it-NAME."""
    for line in sys.stdin:
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
            shutil.copy(m["executable"], f"{directory}/it-{m['target']['name']}")


def sync(src, dst):
    """Copy what differs (a fresh mtime, so cargo rebuilds it) and remove what SRC lacks; files
    that are already equal keep their mtime, so cargo does not rebuild what did not change."""
    src, dst = Path(src), Path(dst)
    wanted = {p.relative_to(src) for p in src.rglob("*") if p.is_file()}
    for rel in sorted(wanted):
        a, b = src / rel, dst / rel
        data = a.read_bytes()
        if not b.is_file() or b.read_bytes() != data:
            b.parent.mkdir(parents=True, exist_ok=True)
            b.write_bytes(data)
            b.chmod(a.stat().st_mode & 0o777)
    for p in sorted(dst.rglob("*"), reverse=True):
        rel = p.relative_to(dst)
        if p.is_file() and rel not in wanted:
            p.unlink()


COMMANDS = {
    "named": (named, 2),
    "field": (field, 2),
    "listed": (listed, 3),
    "count": (count, 1),
    "describe": (describe, 2),
    "sync": (sync, 2),
    "check": (check, 1),
    "test-binaries": (test_binaries, 1),
}

if __name__ == "__main__":
    cmd, *args = sys.argv[1:] or [""]
    fn, arity = COMMANDS.get(cmd, (None, -1))
    if fn is None or len(args) != arity:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    fn(*args)
