"""The statistics: a suite's table of measured values, the verdict rule (stats.py) and its tests,
power, multiplicity, screening and the compute ladder's fit. Imports lab/spec and lab/measures,
never runs or publishing."""
