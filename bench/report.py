#!/usr/bin/env python3
"""Numbers for scripts/bench.sh, standard library only.

  report.py latency LOGDIR LABEL WORKLOAD CLIENTS TPS
      reads pgbench's per-transaction logs in LOGDIR and prints one TSV line:
      label, workload, clients, tps, p50 ms, p99 ms
  report.py compare RESULTS BASE THIS
      RESULTS from scripts/bench-compare.sh: "tree workload clients round tps" lines (the trees
      taking turns) or "tree workload instructions" lines (--instructions); prints, for the
      trees BASE and THIS, the median TPS and the ratios of COMPARE with THIS's ÷ BASE's, or
      the instructions per transaction with THIS's ÷ BASE's
  report.py steps WORKLOAD BEFORE AFTER CALLS TOTAL_BEFORE TOTAL_AFTER
      the per-step table of scripts/bench-compare.sh --steps (BEFORE, AFTER: callgrind_annotate
      --inclusive=yes outputs of a backend of W and of W + CALLS transactions)
  report.py steps-section MARKDOWN TABLES LABEL
      puts those tables into MARKDOWN as its section "Where a gated call's instructions go"
      (which `report` keeps when it writes MARKDOWN again)
  report.py versions MARKDOWN OTHER…
      adds to MARKDOWN (the default version's report) a section with its ratios beside those of
      the OTHER reports (other PostgreSQL versions), replacing the section if it is there
  report.py report RESULTS CORES MARKDOWN SVG PROFILE REPLAY COSTS [DISPATCH]
      RESULTS holds one such line per round of a workload; each workload's figures are its
      median round (the table also gives the lowest and highest TPS of its rounds). Writes the
      markdown table (ratios to the floors, targets met or missed), where a gated
      call's time goes (PROFILE: pg_stat_statements rows; REPLAY: calls and mean µs of a replay's
      entry statement; COSTS: the core's per-call costs), the outbox dispatcher's throughput
      (DISPATCH: `toolgate bench-dispatch` lines, "concurrency batch intents seconds intents/s",
      one per round) and a bar chart
"""

import datetime
import glob
import os
import re
import statistics
import sys
from xml.sax.saxutils import escape


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def latency(logdir, label, workload, clients, tps):
    # pgbench --log: client_id transaction_no latency_us script_no epoch epoch_us
    values = []
    for path in glob.glob(os.path.join(logdir, "tx*")):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    values.append(int(fields[2]) / 1000.0)
    values.sort()
    print(f"{label}\t{workload}\t{clients}\t{float(tps):.1f}\t{percentile(values, 0.5):.3f}\t{percentile(values, 0.99):.3f}")


# What each workload is compared with, and the target the issue sets for the ratio.
COMPARE = [
    ("gated_close", "floor_bound_close", 0.85, "gated ≥ 0.85 × the floor that does the same work"),
    ("gated_pair", "floor_bound_pair", 0.80, "gated + confirm ≥ 0.80 × its floor that does the same work"),
    ("gated_close", "floor_close", 0.75, "gated ≥ 0.75 × floor (plain writes)"),
    ("gated_pair", "floor_pair", 0.75, "gated + confirm ≥ 0.75 × its two-transaction floor (plain writes)"),
    ("replay", "gated_close", 2.0, "replay ≥ 2 × gated"),
    ("denial", "gated_close", 1.0, "denial ≥ gated"),
    ("purchase", "floor_close", None, "for reference: a gated tier-0 purchase against the close floor"),
    ("replay", "durable_write", None, "for reference: replay against a one-row durable write"),
    ("outbox_enqueue", "gated_close", None, "for reference: an outbox call (intent enqueued) against the gated close"),
    ("limited_close", "gated_close", 0.9, "three limits over time (per actor per minute, per day, per tool per month) ≥ 0.9 × gated"),
]

NAMES = {
    "floor_close": "floor (plain writes of a tier-0 close)",
    "floor_bound_close": "floor that does the same work (the binding's SQL as the ERP's owner, the gate's writes once)",
    "floor_bound_pair": "floor of a confirmed close that does the same work (two transactions)",
    "gated_close": "gated: request_close, tier 0",
    "limited_close": "gated: request_close, tier 0, with three limits over time",
    "floor_pair": "floor of a confirmed close (two plain transactions)",
    "gated_pair": "gated + confirm: request_close tier 1, then confirm",
    "replay": "replay: the same key again",
    "denial": "denial at the policy step (role)",
    "purchase": "purchase: request_purchase_part tier 0, 100 cost centres",
    "outbox_enqueue": "outbox: erp_purchase_part tier 0, answers PENDING, intent enqueued",
    "durable_write": "for reference: one small row, written and committed",
    "identity_first_eddsa": "read_order, issuer token EdDSA, each token new (verified)",
    "identity_cached_eddsa": "read_order, issuer token EdDSA, the same token (remembered)",
    "identity_first_rs256": "read_order, issuer token RS256 (RSA 2048), each token new (verified)",
    "identity_cached_rs256": "read_order, issuer token RS256, the same token (remembered)",
    "identity_first_es256": "read_order, issuer token ES256 (P-256), each token new (verified)",
    "identity_cached_es256": "read_order, issuer token ES256, the same token (remembered)",
}


def load(results):
    """(label, clients) -> (median TPS, median p50, median p99, lowest TPS, highest TPS, rounds)."""
    rounds = {}
    with open(results) as f:
        for line in f:
            label, workload, clients, tps, p50, p99 = line.rstrip("\n").split("\t")
            rounds.setdefault((label, int(clients)), []).append((float(tps), float(p50), float(p99)))
    rows = {}
    for key, runs in rounds.items():
        tps = [r[0] for r in runs]
        rows[key] = (statistics.median(tps), statistics.median(r[1] for r in runs),
                     statistics.median(r[2] for r in runs), min(tps), max(tps), len(runs))
    return rows


def profile_section(profile_path, replay_path, costs_path):
    """Where a gated tier-0 close spends its time: SQL statements and the pure steps."""
    rows = []
    with open(profile_path) as f:
        for line in f:
            calls, mean_us, query = line.rstrip("\n").split("\t", 2)
            rows.append((int(calls), float(mean_us), query))
    with open(replay_path) as f:
        replay = [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]
    if not rows:
        return []
    # The entry point's own statement is the call; everything nested is counted per call.
    top = max(rows, key=lambda r: r[1] * r[0])
    calls = top[0]
    out = ["", "## Where a gated call's time goes\n",
           f"One more `gated_close` run at 1 client with `pg_stat_statements.track = all`: {calls:,} calls, "
           f"{top[1]:.0f} µs of server time per call inside the entry point's statement. Each SQL statement "
           "the gate runs, per call:\n",
           "| statement | per call | µs each | µs per call |", "|---|---:|---:|---:|"]
    sql_total = 0.0
    for n, mean_us, query in rows:
        if query == top[2]:
            continue
        per_call = n / calls
        sql_total += per_call * mean_us
        shown = query if len(query) <= 90 else query[:87] + "…"
        out.append(f"| `{shown}` | {per_call:.2f} | {mean_us:.1f} | {per_call * mean_us:.1f} |")
    out.append(f"| **all statements** | | | **{sql_total:.0f}** |")
    out.append("")
    for calls, mean_us in replay:
        out.append(f"A replay of a settled key, measured the same way ({int(calls):,} calls): {float(mean_us):.0f} µs "
                   "of server time per call.\n")
    out.append("The pure steps, per call (`cargo run --release -p toolgate-core --example costs`):\n")
    out.append("```")
    with open(costs_path) as f:
        out.extend(line.rstrip("\n") for line in f)
    out.append("```")
    return out


def dispatch_section(dispatch_path):
    """The dispatcher's throughput against the fake ERP: each concurrency's median round."""
    rounds = {}
    with open(dispatch_path) as f:
        for line in f:
            if line.strip():
                # (bench-dispatch prints more columns after these: its CPU, the queue's lag.)
                c, batch, intents, seconds, rate = line.split("\t")[:5]
                rounds.setdefault(int(c), []).append((int(batch), int(intents), float(seconds), float(rate)))
    if not rounds:
        return []
    intents = max(r[1] for runs in rounds.values() for r in runs)
    out = ["", "## The outbox dispatcher: intents delivered per second\n",
           f"`toolgate bench-dispatch`, after the workloads, in a database of its own: each run enqueues {intents:,} "
           "intents of the outbox tool `erp_purchase_part` through the gate (not timed), starts the fake ERP "
           "(`crates/fake-erp`) on 127.0.0.1 with no rate limits and no faults, and times the dispatcher of "
           "`toolgate`'s release build (`dispatch::run`, draining once: claim a batch, send each intent with its key, poll the ERP's protocol, "
           "settle it) until every intent is settled. After each run the ERP made one effect per intent, from one "
           "write each, and every outbox row is SUCCEEDED with its dispatch audit row, or the benchmark fails. "
           "The fake answers a write PENDING and the dispatcher polls its protocol first 50 ms later, so an intent "
           "spends at least 50 ms in flight: concurrency × 20 intents/s is the ceiling. Each figure is the "
           "concurrency's median round. The dispatcher on its own (an ERP answering at once, its CPU per delivery, "
           "the queue's lag while a client enqueues) is `scripts/bench-dispatch.sh`'s: "
           "[benchmarks-dispatch.md](benchmarks-dispatch.md). What an agent's call costs end to end through "
           "`toolgate mcp --http`, beside the same call in SQL, is `scripts/bench-agent.sh`'s: "
           "[benchmarks-agent.md](benchmarks-agent.md).\n",
           "| intents in flight | batch | intents/s | range | seconds per run |", "|---:|---:|---:|---:|---:|"]
    for c in sorted(rounds):
        runs = rounds[c]
        rates = [r[3] for r in runs]
        out.append(f"| {c} | {runs[0][0]} | {statistics.median(rates):,.0f} | {min(rates):,.0f}–{max(rates):,.0f} "
                   f"| {statistics.median(r[2] for r in runs):.2f} |")
    return out


def report(results, cores, md_path, svg_path, profile_path=None, replay_path=None, costs_path=None,
           dispatch_path=None):
    rows = load(results)
    clients = sorted({c for (label, c) in rows if not label.startswith("scale-")})
    today = datetime.date.today().isoformat()
    # scripts/bench.sh names the server's version (pg_config --version) and the commit measured.
    pg = os.environ.get("BENCH_PG", "PostgreSQL 15")
    commit = os.environ.get("BENCH_COMMIT")
    out = []
    out.append("# Benchmarks: what the gate costs\n")
    n_rounds = max(v[5] for (label, c), v in rows.items() if not label.startswith("scale-"))
    out.append(f"Measured {today}{f', at commit {commit},' if commit else ''} on this project's machine ({cores} cores) by `scripts/bench.sh`: one run, one "
               f"throwaway {pg} cluster (fsync and synchronous_commit on, shared_buffers 512MB), the "
               "release build, pgbench `-M prepared` custom scripts from `bench/` over loopback. At each "
               f"concurrency the workloads take turns for {n_rounds} round(s) of equal duration; each figure is "
               "the workload's median round, and the TPS range is its slowest and fastest round. TPS counts "
               "pgbench transactions: for the confirmed close, one transaction is the pair (propose, then "
               "confirm). Latency is per transaction.\n")
    out.append("| workload | clients | TPS | TPS range | p50 ms | p99 ms |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for workload in NAMES:
        for c in clients:
            if (workload, c) in rows:
                tps, p50, p99, low, high, _ = rows[(workload, c)]
                out.append(f"| {NAMES[workload]} | {c} | {tps:,.0f} | {low:,.0f}–{high:,.0f} | {p50:.2f} | {p99:.2f} |")
    out.append("")
    out.append("## Ratios and targets\n")
    out.append("| ratio | clients | value | target | met |")
    out.append("|---|---:|---:|---:|:---:|")
    for workload, base, target, text in COMPARE:
        for c in clients:
            if (workload, c) in rows and (base, c) in rows:
                ratio = rows[(workload, c)][0] / rows[(base, c)][0]
                met = "—" if target is None else ("yes" if ratio >= target else "**no**")
                tgt = "—" if target is None else f"≥ {target:g}"
                out.append(f"| {text} | {c} | {ratio:.3f} | {tgt} | {met} |")
    scale = sorted((int(label[len("scale-"):]), v) for (label, c), v in rows.items() if label.startswith("scale-"))
    if scale:
        out.append("")
        out.append("## Scale: gated close (4 clients) with the ledger and audit pre-filled\n")
        out.append("| rows in ledger and audit | TPS | p50 ms | p99 ms |")
        out.append("|---:|---:|---:|---:|")
        for size, (tps, p50, p99, *_) in scale:
            out.append(f"| {size:,} | {tps:,.0f} | {p50:.2f} | {p99:.2f} |")
        ratio = scale[-1][1][0] / scale[0][1][0]
        out.append("")
        out.append(f"TPS at {scale[-1][0]:,} rows is {ratio:.3f} × TPS at {scale[0][0]:,} rows (target ≥ 0.9: "
                   f"{'met' if ratio >= 0.9 else '**missed**'}).")
    if dispatch_path:
        out.extend(dispatch_section(dispatch_path))
    if profile_path and replay_path and costs_path:
        out.extend(profile_section(profile_path, replay_path, costs_path))
    out.append("")
    out.append(f"![TPS per workload and concurrency]({os.path.basename(svg_path)})")
    # The per-step count (scripts/bench-compare.sh --steps) is not this run's: kept as it was.
    kept = section_of(md_path, STEPS_HEADING)
    with open(md_path, "w") as f:
        f.write("\n".join(out) + "\n" + ("\n" + kept if kept else ""))
    write_svg(rows, clients, cores, today, svg_path)


def write_svg(rows, clients, cores, today, path):
    workloads = [w for w in NAMES if any((w, c) in rows for c in clients)]
    width, height, left, bottom, top = 900, 420, 70, 110, 50
    plot_h = height - bottom - top
    group_w = (width - left - 20) / max(len(workloads), 1)
    bar_w = group_w / (len(clients) + 1)
    peak = max(rows[(w, c)][0] for w in workloads for c in clients if (w, c) in rows)
    colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759"]
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">pg_toolgate: TPS per workload '
           f'({escape(today)}, {cores} cores)</text>']
    for i in range(5):
        v = peak * i / 4
        y = top + plot_h - plot_h * i / 4
        svg.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 20}" y2="{y:.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    for gi, w in enumerate(workloads):
        x0 = left + gi * group_w + bar_w / 2
        for ci, c in enumerate(clients):
            if (w, c) not in rows:
                continue
            tps = rows[(w, c)][0]
            h = plot_h * tps / peak
            x = x0 + ci * bar_w
            svg.append(f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w * 0.9:.1f}" height="{h:.1f}" '
                       f'fill="{colors[ci % len(colors)]}"><title>{escape(w)} c={c}: {tps:,.0f} TPS</title></rect>')
        label_x = left + gi * group_w + group_w / 2
        svg.append(f'<text x="{label_x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{escape(w)}</text>')
    for ci, c in enumerate(clients):
        x = left + ci * 110
        svg.append(f'<rect x="{x}" y="{height - 30}" width="12" height="12" fill="{colors[ci % len(colors)]}"/>')
        svg.append(f'<text x="{x + 16}" y="{height - 20}">{c} client{"s" if c > 1 else ""}</text>')
    svg.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")


VERSIONS_HEADING = "## PostgreSQL versions side by side"
STEPS_HEADING = "## Where a gated call's instructions go"


def section_of(md_path, heading):
    """The section HEADING of the markdown file (up to the next `## `), or ""."""
    if not os.path.exists(md_path):
        return ""
    text = open(md_path).read()
    if heading not in text:
        return ""
    rest = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return heading + rest.rstrip("\n") + "\n"


def steps_section(md_path, tables_path, label):
    """Put the --steps tables (TABLES_PATH) into MD_PATH as its section STEPS_HEADING, in place of
    the one there or at the end."""
    section = (STEPS_HEADING + "\n\n" + f"Counted {label} by `scripts/bench-compare.sh --steps`: "
               "valgrind's callgrind in one server process, one pgbench connection of 100 transactions "
               "then another of 400, the second's instructions less the first's over 300 (so a count "
               "does not move with the machine's load). Each row is a function of the gate in a build "
               "with the feature `steps`, which keeps each step out of line so the profile can name it "
               "(its totals differ a little from the release build's), with everything it calls; "
               "*the rest of* a row is what it does outside the rows under it. `gated_propose` and "
               "`gated_confirm` are the two transactions of the confirmed close (`gated_pair`); "
               "`limited_close` is `gated_close` by a caller three limits over time apply to "
               "([limits.md](limits.md#what-a-limit-costs)).\n"
               + open(tables_path).read().rstrip("\n") + "\n")
    text = open(md_path).read() if os.path.exists(md_path) else ""
    if STEPS_HEADING in text:
        before, after = text.split(STEPS_HEADING, 1)
        rest = after.split("\n## ", 1)
        text = before + section + ("\n## " + rest[1] if len(rest) > 1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(md_path, "w") as f:
        f.write(text)


def ratios_of(md_path):
    """A report's version, its date (and commit), and its ratio table: {(ratio, clients): (value, target)}."""
    with open(md_path) as f:
        text = f.read()
    version = re.search(r"throwaway (PostgreSQL [0-9.]+)", text).group(1)
    # "Measured DATE, at commit C," (written by report) or "Measured DATE (published in commit C)".
    measured = re.search(r"^Measured ([0-9-]+)(?:, at commit ([0-9a-f]+),| \(published in commit ([0-9a-f]+)\))?",
                         text, re.M)
    commit = measured.group(2) or measured.group(3)
    label = measured.group(1) + (f", {commit}" if commit else "")
    table = text.split("## Ratios and targets", 1)[1].split("\n## ", 1)[0]
    ratios = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].isdigit():
            ratios[(cells[0], cells[1])] = (cells[2], cells[3])
    return version, label, ratios


def versions(md_path, *others):
    reports = [ratios_of(p) for p in (md_path, *others)]
    keys = list(reports[0][2])
    keys += [k for _, _, r in reports[1:] for k in r if k not in keys]
    out = [VERSIONS_HEADING, "",
           "The same workloads and ratios on each PostgreSQL version pg_toolgate supports, each from its own full "
           "run of `scripts/bench.sh` (`--pg 18` for 18; its whole report: "
           + ", ".join(f"[{os.path.basename(p)}]({os.path.basename(p)})" for p in others)
           + "). The runs were made at different times on a shared machine: compare ratios, not TPS across "
           "runs.", "",
           "| ratio | clients | " + " | ".join(f"{v} ({label})" for v, label, _ in reports) + " | target |",
           "|---|---:|" + "---:|" * len(reports) + "---:|"]
    for k in keys:
        target = next(r[k][1] for _, _, r in reports if k in r)
        out.append(f"| {k[0]} | {k[1]} | " + " | ".join(r[k][0] if k in r else "—" for _, _, r in reports)
                   + f" | {target} |")
    with open(md_path) as f:
        text = f.read()
    section = "\n".join(out) + "\n\n"
    if VERSIONS_HEADING in text:
        before, after = text.split(VERSIONS_HEADING, 1)
        rest = after.split("\n## ", 1)
        text = before + section + ("## " + rest[1] if len(rest) > 1 else "")
    else:
        # After the ratio table: the section the versions are compared by.
        before, after = text.split("## Ratios and targets", 1)
        rest = after.split("\n## ", 1)
        text = before + "## Ratios and targets" + rest[0] + "\n" + section + ("## " + rest[1] if len(rest) > 1 else "")
    with open(md_path, "w") as f:
        f.write(text)


def compare(results, base_name, this_name):
    rows = [line.rstrip("\n").split("\t") for line in open(results) if line.strip()]
    names = {"base": base_name, "this": this_name}
    if rows and len(rows[0]) == 3:
        print(f"instructions per transaction (callgrind)\n\n| workload | {base_name} | {this_name} | ÷ |\n|---|---:|---:|---:|")
        ir = {(v, w): int(n) for v, w, n in rows}
        for w in dict.fromkeys(w for _, w, _ in rows):
            if ("base", w) in ir and ("this", w) in ir:
                print(f"| {w} | {ir[('base', w)]:,} | {ir[('this', w)]:,} | {ir[('this', w)] / ir[('base', w)]:.3f} |")
            elif ("this", w) in ir:
                print(f"| {w} | — | {ir[('this', w)]:,} | — |")
        # Where the cores are the limit, TPS follows instructions: a ratio of TPS is the floor's
        # instructions over the gated workload's.
        print(f"\nratios (the floor's instructions ÷ the workload's)\n\n| ratio | {base_name} | {this_name} |\n|---|---:|---:|")
        for a, b, _, label in COMPARE:
            cells = [f"{ir[(v, b)] / ir[(v, a)]:.3f}" if (v, a) in ir and (v, b) in ir else "—" for v in ("base", "this")]
            if cells != ["—", "—"]:
                print(f"| {label} | {cells[0]} | {cells[1]} |")
        return
    tps = {}
    for v, w, c, _, t in rows:
        tps.setdefault((v, w, int(c)), []).append(float(t or "nan"))
    med = {k: statistics.median(x) for k, x in tps.items()}
    clients = sorted({c for _, _, c in med})
    head = "".join(f" {names['base']}, {c} | {names['this']}, {c} | ÷ |" for c in clients)
    print(f"median TPS of the rounds\n\n| workload |{head}\n|---|" + "---:|---:|---:|" * len(clients))
    for w in dict.fromkeys(w for _, w, _ in med):
        cells = "".join(
            f" {med[('base', w, c)]:,.0f} | {med[('this', w, c)]:,.0f} | {med[('this', w, c)] / med[('base', w, c)]:.3f} |"
            for c in clients
            if ("base", w, c) in med and ("this", w, c) in med
        )
        print(f"| {w} |{cells}")
    print(f"\nratios (median TPS ÷ median TPS)\n\n| ratio |{head}\n|---|" + "---:|---:|---:|" * len(clients))
    for a, b, _, label in COMPARE:
        cells = ""
        for c in clients:
            try:
                ra = med[("base", a, c)] / med[("base", b, c)]
                rt = med[("this", a, c)] / med[("this", b, c)]
            except KeyError:
                continue
            cells += f" {ra:.3f} | {rt:.3f} | {rt / ra:.3f} |"
        if cells:
            print(f"| {label} |{cells}")


# Where a transaction's instructions go (scripts/bench-compare.sh --steps): each row a function of
# the steps build, with all it calls (inclusive), and under the rows a function is the parent of,
# what is left of it. (label, function, parent); a row whose parent is None starts an entry point.
REQUEST = [
    ("the gate (`gate::request`)", "pg_toolgate::gate::request", "call_wrapper"),
    ("1 identity", "pg_toolgate::gate::identify", "pg_toolgate::gate::request"),
    ("2 contract: schema, canonical form, digest and HMAC", "pg_toolgate::gate::contract::check", "pg_toolgate::gate::request"),
    ("3 idempotency: the key held, the ledger read", "pg_toolgate::gate::idempotency::reserve", "pg_toolgate::gate::request"),
    ("the subtransaction steps 4 to 8 run in", "pg_toolgate::gate::scope::scope", "pg_toolgate::gate::request"),
    ("steps 4 to 8", "pg_toolgate::gate::decide", "pg_toolgate::gate::scope::scope"),
    ("4 authorization: policy, role, the target's locked read", "pg_toolgate::gate::authorize", "pg_toolgate::gate::decide"),
    ("5 domain rules", "pg_toolgate::gate::check_domain", "pg_toolgate::gate::decide"),
    ("6 quota", "pg_toolgate::gate::quota::consume", "pg_toolgate::gate::decide"),
    ("6 limits over time", "pg_toolgate::gate::limits::consume", "pg_toolgate::gate::decide"),
]
CLOSE = (
    [("the C function `call`: the arguments in, the gate, the reply out", "call_wrapper", None)]
    + REQUEST
    + [
        ("8 effect: the bound effect function", "pg_toolgate::gate::effect::apply", "pg_toolgate::gate::decide"),
        ("the ledger's row (settled)", "pg_toolgate::gate::Decided::settle", "pg_toolgate::gate::request"),
        ("the audit row", "pg_toolgate::audit::Audit::record", "pg_toolgate::gate::request"),
    ]
)
STEPS = {
    "gated_close": CLOSE,
    # The same close by a caller three limits over time apply to (bench/setup.sql).
    "limited_close": CLOSE,
    "gated_propose": [("the C function `call`: the arguments in, the gate, the reply out", "call_wrapper", None)]
    + REQUEST
    + [
        ("7 the proposal: conversation, supersede, consent text, row", "pg_toolgate::gate::confirmation::propose", "pg_toolgate::gate::decide"),
        ("the ledger's row (pending)", "pg_toolgate::gate::idempotency::Held::pend", "pg_toolgate::gate::decide"),
        ("the audit row", "pg_toolgate::audit::Audit::record", "pg_toolgate::gate::request"),
    ],
    "gated_confirm": [
        ("the C function `confirm`: the arguments in, the gate, the reply out", "confirm_wrapper", None),
        ("the gate (`gate::confirm`)", "pg_toolgate::gate::confirm", "confirm_wrapper"),
        ("1 identity", "pg_toolgate::gate::identify", "pg_toolgate::gate::confirm"),
        ("7 the answer's signature", "pg_toolgate::gate::confirmation::verify_token", "pg_toolgate::gate::confirm"),
        ("the subtransaction the rest runs in", "pg_toolgate::gate::scope::scope", "pg_toolgate::gate::confirm"),
        ("the proposal judged, steps 4, 5 and 8", "pg_toolgate::gate::decide_proposal", "pg_toolgate::gate::scope::scope"),
        ("7 the proposal read, its target locked", "pg_toolgate::gate::confirmation::load", "pg_toolgate::gate::decide_proposal"),
        ("7 the answer judged, the proposal locked and marked", "pg_toolgate::gate::confirmation::answer", "pg_toolgate::gate::decide_proposal"),
        ("the proposal marked applied, which locks it", "pg_toolgate::gate::confirmation::claim", "pg_toolgate::gate::confirmation::answer"),
        ("4 authorization (the target already locked)", "pg_toolgate::gate::authorize", "pg_toolgate::gate::decide_proposal"),
        ("5 domain rules", "pg_toolgate::gate::check_domain", "pg_toolgate::gate::decide_proposal"),
        ("8 effect: the bound effect function", "pg_toolgate::gate::effect::apply", "pg_toolgate::gate::decide_proposal"),
        ("the ledger's row (settled)", "pg_toolgate::gate::Decided::settle", "pg_toolgate::gate::confirm"),
        ("the audit row", "pg_toolgate::audit::Audit::record", "pg_toolgate::gate::confirm"),
    ],
}


def inclusive(path):
    """function -> inclusive instructions, from `callgrind_annotate --inclusive=yes` output."""
    costs = {}
    for line in open(path):
        m = re.match(r"^\s*([\d,]+) \([ \d.]+%\)\s+(.*)$", line)
        if not m or m.group(2) == "PROGRAM TOTALS":
            continue
        where = re.sub(r" \[[^\]]*\]$", "", m.group(2))
        function = where.split(":", 1)[1] if ":" in where else where
        function = re.sub(r"::h[0-9a-f]{16}$", "", function)
        costs[function] = costs.get(function, 0) + int(m.group(1).replace(",", ""))
    return costs


def steps(workload, before, after, calls, total_before, total_after):
    """The --steps table of WORKLOAD: each function's inclusive instructions in the callgrind
    summary AFTER less those in BEFORE, per transaction (CALLS more in AFTER)."""
    calls = int(calls)
    a, b = inclusive(before), inclusive(after)

    def per(function):
        return (b.get(function, 0) - a.get(function, 0)) / calls

    total = (int(total_after) - int(total_before)) / calls
    rows = STEPS[workload]
    print(f"\n`{workload}`: {total:,.0f} instructions per transaction\n")
    print("| where | instructions | share |\n|---|---:|---:|")
    roots = [f for _, f, parent in rows if parent is None]
    outside = total - sum(per(f) for f in roots)
    print(f"| PostgreSQL around the call: the statement's parse, plan and executor, the commit | {outside:,.0f} | {outside / total:.1%} |")
    # Split into entry points, each a root and the rows under it.
    groups = []
    for row in rows:
        if row[2] is None:
            groups.append([])
        groups[-1].append(row)
    for group in groups:
        parent_of = {f: p for _, f, p in group}

        def under(function, ancestor):
            while function is not None:
                function = parent_of.get(function)
                if function == ancestor:
                    return True
            return False

        for index, (label, function, parent) in enumerate(group):
            value = per(function)
            print(f"| {label} | {value:,.0f} | {value / total:.1%} |")
            # After the last row under a parent, what is left of the parent: innermost first.
            for p in reversed([f for _, f, _ in group[: index + 1]]):
                below = [i for i, (_, f, _) in enumerate(group) if under(f, p)]
                if below and below[-1] == index:
                    rest = per(p) - sum(per(f) for _, f, q in group if q == p)
                    name = next(lbl for lbl, f, _ in group if f == p)
                    print(f"| … the rest of {name} | {rest:,.0f} | {rest / total:.1%} |")


if __name__ == "__main__":
    if sys.argv[1] == "latency":
        latency(*sys.argv[2:7])
    elif sys.argv[1] == "report":
        report(*sys.argv[2:10])
    elif sys.argv[1] == "versions":
        versions(*sys.argv[2:])
    elif sys.argv[1] == "compare":
        compare(*sys.argv[2:5])
    elif sys.argv[1] == "steps":
        steps(*sys.argv[2:8])
    elif sys.argv[1] == "steps-section":
        steps_section(*sys.argv[2:5])
    else:
        sys.exit(__doc__)
