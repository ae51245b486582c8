"""Fail CI unless a pytest JUnit XML report shows a real pass: tests were collected, none failed or
errored, and at least ``--min-passed`` passed (a suite that only skips must not look green).

usage: python .ci/check_report.py REPORT.xml [--min-passed N]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET


def summarize(path: str) -> dict[str, int]:
    """Totals over every <testsuite> of the report."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in totals:
            totals[key] += int(suite.get(key, 0))
    totals["passed"] = totals["tests"] - totals["failures"] - totals["errors"] - totals["skipped"]
    return totals


def verdict(totals: dict[str, int], min_passed: int = 1) -> str | None:
    """None when the run passed, else why not."""
    if totals["tests"] == 0:
        return "no tests were collected"
    if totals["failures"] or totals["errors"]:
        return f"{totals['failures']} failed, {totals['errors']} errors"
    if totals["passed"] < min_passed:
        return f"only {totals['passed']} passed (at least {min_passed} required); {totals['skipped']} skipped"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("report")
    parser.add_argument("--min-passed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        totals = summarize(args.report)
    except (OSError, ET.ParseError, ValueError) as exc:
        print(f"check_report: cannot read the test report {args.report}: {exc}", file=sys.stderr)
        return 1
    why = verdict(totals, args.min_passed)
    summary = ", ".join(f"{v} {k}" for k, v in totals.items())
    print(f"check_report: {summary}" + (f" -- FAIL: {why}" if why else " -- ok"))
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
