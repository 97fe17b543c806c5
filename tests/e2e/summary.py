#!/usr/bin/env python3
"""Per suite and test pattern: how many specs passed, failed, were skipped,
from a ginkgo junit report of the External Storage suites.

    summary.py junit.xml [junit.xml ...]
    summary.py --compare NAME=junit.xml[+rerun.xml...] NAME=... [--baseline NAME]

A spec's name reads "External Storage [Driver: D] [Testpattern: P] SUITE
what it checks"; the failed ones are listed under the table with the first
line of their failure. A later report (a focused rerun) decides the specs
it ran, passed or failed; the specs it skipped keep the earlier result.

--compare puts runs side by side, passed/failed/skipped per suite and
pattern for each; with --baseline, a row where a run fails a spec that the
baseline passes is marked "<<" and the exit status is 1.
"""
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

NAME = re.compile(r"\[Driver: ([^\]]+)\] \[Testpattern: (.+?)\] (\S+) (.*)")


def cases(paths):
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            sys.exit(f"{path}: no junit report to read ({e}); the run's e2e.log beside it says why")
        for case in root.iter("testcase"):
            m = NAME.search(case.get("name", ""))
            if not m:
                continue
            driver, pattern, suite, what = m.groups()
            if case.find("failure") is not None or case.find("error") is not None:
                node = case.find("failure")
                node = node if node is not None else case.find("error")
                why = (node.get("message") or node.text or "").strip().splitlines()
                yield driver, pattern, suite, what, "failed", why[0] if why else ""
            elif case.find("skipped") is not None or case.get("status") == "skipped":
                yield driver, pattern, suite, what, "skipped", ""
            else:
                yield driver, pattern, suite, what, "passed", ""


def results(paths):
    """Each spec's last result: a later report's skip does not undo an
    earlier report's pass or failure."""
    last = {}
    for driver, pattern, suite, what, status, why in cases(paths):
        key = (pattern, suite, what)
        if status != "skipped" or key not in last:
            last[key] = (status, why)
    return last


def compare(args) -> int:
    baseline = None
    if "--baseline" in args:
        i = args.index("--baseline")
        if i + 1 == len(args):
            sys.exit("--baseline needs the NAME of one of the runs")
        baseline = args[i + 1]
        del args[i : i + 2]
    runs = {}
    for arg in args:
        name, _, files = arg.partition("=")
        if not files:
            sys.exit(f"{arg}: NAME=junit.xml[+rerun.xml...] expected")
        runs[name] = results(files.split("+"))
    if baseline is not None and baseline not in runs:
        sys.exit(f"--baseline {baseline}: not one of {', '.join(runs)}")
    rows = defaultdict(lambda: {n: [0, 0, 0] for n in runs})
    col = {"passed": 0, "failed": 1, "skipped": 2}
    for name, specs in runs.items():
        for (pattern, suite, _), (status, _) in specs.items():
            rows[(suite, pattern)][name][col[status]] += 1
    width = max(12, *(len(n) for n in runs))
    print(f"{'suite':<26} {'pattern':<52} " + " ".join(f"{n:>{width}}" for n in runs))
    regressions = 0
    for (suite, pattern), per in sorted(rows.items()):
        if all(p + f == 0 for p, f, _ in per.values()):
            continue
        cells = " ".join(f"{'/'.join(map(str, v)):>{width}}" for v in per.values())
        mark = ""
        if baseline is not None and per[baseline][1] == 0 and per[baseline][0] > 0:
            if any(v[1] > 0 for n, v in per.items() if n != baseline):
                mark, regressions = "  <<", regressions + 1
        print(f"{suite:<26} {pattern[:52]:<52} {cells}{mark}")
    print("(passed/failed/skipped)")
    return 1 if regressions else 0


def main() -> None:
    if sys.argv[1:2] == ["--compare"]:
        sys.exit(compare(sys.argv[2:]))
    table = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
    failures = []
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for (pattern, suite, what), (status, why) in sorted(results(sys.argv[1:]).items()):
        table[(suite, pattern)][status] += 1
        totals[status] += 1
        if status == "failed":
            failures.append(f"[{pattern}] {suite} {what}\n    {why[:300]}")
    print(f"{'suite':<28} {'pattern':<58} passed failed skipped")
    for (suite, pattern), n in sorted(table.items()):
        if n["passed"] + n["failed"] == 0:
            continue
        print(f"{suite:<28} {pattern[:58]:<58} {n['passed']:>6} {n['failed']:>6} {n['skipped']:>7}")
    print(f"{'all':<28} {'':<58} {totals['passed']:>6} {totals['failed']:>6} {totals['skipped']:>7}")
    if failures:
        print("\nfailed:")
        print("\n".join(failures))


if __name__ == "__main__":
    main()
