"""A pytest plugin for the GPU stages (``-p attnbook.gpu.record --record-to PATH``):
each test's outcome appended to PATH as a JSON line the moment it is known, with the
end of its report when it did not pass. A stage killed at its time limit writes no
junit file and no summary; this file still says which tests failed, and why."""
from __future__ import annotations

import json

REPORT_CHARS = 4000   # the end of a failure's report: the assertion and its values


def pytest_addoption(parser):
    parser.addoption("--record-to", metavar="PATH",
                     help="append each test's outcome to PATH (JSON lines)")


_record = {"path": None}


def pytest_configure(config):
    # under xdist every worker loads the plugin too: only the controller, which sees
    # every worker's reports (and a crashed worker's), writes
    if not hasattr(config, "workerinput"):
        _record["path"] = config.getoption("record_to")


def pytest_runtest_logreport(report):
    path = _record["path"]
    if path is None or (report.passed and report.when != "call"):
        return
    line = dict(test=report.nodeid, when=report.when, outcome=report.outcome,
                seconds=round(report.duration, 3))
    if not report.passed:
        line["report"] = str(report.longrepr)[-REPORT_CHARS:]
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
