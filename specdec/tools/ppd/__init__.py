"""PPD prompt tokens offline: training by self-distillation, its data and held-out accuracy, and the
per-device hardware profile. The drafter only reads what these write (specdec.drafters.ppd)."""
