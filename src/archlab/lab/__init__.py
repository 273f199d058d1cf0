"""The ablation lab: a lecture's claims as equal-budget experiments with computed verdicts (`archlab ablate`)."""
