"""Publishing: a suite's record, its pages (results.md, report.html), the report of a finished plan
and docs/results. May import every other part of the lab."""
