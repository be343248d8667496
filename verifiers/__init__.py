"""Built-in verifiers, installed as `specdec.verifiers` and registered through entry points."""
