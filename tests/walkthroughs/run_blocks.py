#!/usr/bin/env python3
"""Run one section of a Markdown page as a reader would: its ```sql and ```sh blocks, as written,
top to bottom. The sql blocks go to one psql session (SET ROLE and psql variables carry from one
block to the next), each sh block runs in bash between them, once the sql above it has run. Other
blocks (```json, ```text…) are only read. scripts/walkthroughs.sh drives it; it needs nothing but
Python's standard library.

  run_blocks.py FILE HEADING DIR OUT ANSWERS -- PSQL [ARG…]

FILE's section is HEADING's line up to the next heading of the same level or above. psql runs in
DIR with `-f` a pipe fed block by block, stdin closed; give it ON_ERROR_STOP=1. The sh blocks run
with `bash -euo pipefail` in DIR too, their stdin the file ANSWERS, shared (each `read` takes the
next line). OUT receives each block as run, psql.out what psql printed and sh.out what the sh
blocks printed. Exit 0 when every block ran and psql ended cleanly; 1, naming the block's line,
otherwise.
"""
import os
import re
import subprocess
import sys
import time

BLOCK_TIMEOUT = 120


def section(path, heading):
    lines = open(path, encoding="utf-8").read().split("\n")
    try:
        start = lines.index(heading)
    except ValueError:
        sys.exit(f"{path}: no line {heading!r}")
    level = len(heading) - len(heading.lstrip("#"))
    blocks, fence, body, first = [], None, [], 0
    for n, line in enumerate(lines[start + 1:], start + 2):
        if fence is None:
            m = re.match(r"(#{1,6}) ", line)
            if m and len(m.group(1)) <= level:
                break
            m = re.match(r"```(\w*)\s*$", line)
            if m:
                fence, body, first = m.group(1), [], n
        elif line.startswith("```"):
            if fence in ("sql", "sh"):
                blocks.append((fence, first, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
    if fence is not None:
        sys.exit(f"{path}:{first}: a block that never ends")
    return blocks


def fail(message, outputs):
    for name in outputs:
        if os.path.exists(name):
            tail = open(name, encoding="utf-8", errors="replace").read().splitlines()[-30:]
            print(f"--- {os.path.basename(name)} (last lines)", *tail, sep="\n", file=sys.stderr)
    print(message, file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) < 8 or sys.argv[6] != "--":
        sys.exit(__doc__)
    path, heading, directory, saved, answers = sys.argv[1:6]
    psql = sys.argv[7:]
    blocks = section(path, heading)
    if not any(kind == "sql" for kind, _, _ in blocks):
        sys.exit(f"{path}: no sql block under {heading!r}")
    os.makedirs(saved, exist_ok=True)
    psql_out, sh_out = os.path.join(saved, "psql.out"), os.path.join(saved, "sh.out")
    outputs = [psql_out, sh_out]
    pipe = os.path.join(saved, "psql.fifo")
    if os.path.exists(pipe):
        os.unlink(pipe)
    os.mkfifo(pipe, 0o600)
    with open(psql_out, "w") as out:
        server = subprocess.Popen(psql + ["-f", pipe], cwd=directory, stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=subprocess.STDOUT)
    # psql opens the pipe once it has connected; until then (or if it never does) a writer waits.
    while True:
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            if server.poll() is not None:
                fail(f"psql ended before reading the first block (exit {server.returncode})", outputs)
            time.sleep(0.05)
    os.set_blocking(fd, True)
    feed = os.fdopen(fd, "w", encoding="utf-8")
    where = os.path.basename(path)
    with open(answers) as stdin, open(sh_out, "w") as sh_log:
        for i, (kind, line, text) in enumerate(blocks, 1):
            name = os.path.join(saved, f"{i:02d}.{kind}")
            with open(name, "w", encoding="utf-8") as f:
                f.write(text)
            if kind == "sh":
                sh_log.write(f"--- {where}:{line}\n")
                sh_log.flush()
                done = subprocess.run(["bash", "-euo", "pipefail", name], cwd=directory, stdin=stdin,
                                      stdout=sh_log, stderr=subprocess.STDOUT)
                if done.returncode != 0:
                    fail(f"{where}:{line}: the sh block stopped (exit {done.returncode})", outputs)
                continue
            # The sql block, then a mark psql makes only once every statement above it has run.
            mark = os.path.join(saved, f"{i:02d}.done")
            try:
                feed.write(text + f"\\! touch '{mark}'\n")
                feed.flush()
            except BrokenPipeError:
                fail(f"{where}:{line}: psql had already stopped", outputs)
            deadline = time.monotonic() + BLOCK_TIMEOUT
            while not os.path.exists(mark):
                if server.poll() is not None:
                    fail(f"{where}:{line}: the sql block stopped at an error (psql exit {server.returncode})", outputs)
                if time.monotonic() > deadline:
                    server.kill()
                    fail(f"{where}:{line}: the sql block did not finish in {BLOCK_TIMEOUT} s", outputs)
                time.sleep(0.02)
    feed.close()
    if server.wait(timeout=BLOCK_TIMEOUT) != 0:
        fail(f"psql ended with exit {server.returncode}", outputs)
    print(f"{where}: {len(blocks)} blocks ran as written "
          f"({sum(k == 'sql' for k, _, _ in blocks)} sql, {sum(k == 'sh' for k, _, _ in blocks)} sh)")


if __name__ == "__main__":
    main()
