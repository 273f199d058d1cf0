"""The `archlab` sub-commands, one module each: parse flags, build the config, call the library."""
