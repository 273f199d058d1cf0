"""What the lab measures of one finished run (the MEASURES registry and its measures) and the timing
pairs beside the runs. Imports nothing else of the lab."""
