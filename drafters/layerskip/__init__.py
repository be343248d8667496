"""Layer-skip self-speculation (Draft & Verify): Bayesian-optimised skip sets, adaptive draft exiting."""
