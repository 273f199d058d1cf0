"""What a suite asks for: the suite file, its arms and their configs, the budgets, the screening
designs and the names `archlab ablate`'s flags offer. Imports only lab/measures (the names a
suite may measure)."""
