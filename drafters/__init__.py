"""Built-in drafters, installed as `specdec.drafters` and registered through entry points."""
