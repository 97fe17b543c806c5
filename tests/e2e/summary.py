#!/usr/bin/env python3
"""Per suite and test pattern: how many specs passed, failed, were skipped,
from a ginkgo junit report of the External Storage suites.

    summary.py junit.xml [junit.xml ...]

A spec's name reads "External Storage [Driver: D] [Testpattern: P] SUITE
what it checks"; the failed ones are listed under the table with the first
line of their failure.
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


def main() -> None:
    table = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
    failures = []
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for driver, pattern, suite, what, status, why in cases(sys.argv[1:]):
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
